#include "plan/stage_info.hpp"

#include "plan/microbatches.hpp"

#include <stdexcept>

namespace ap {

std::vector<layer_range> uniform_chunk_ranges(std::size_t total_layers, int total_chunks) {
  if (total_chunks <= 0)
    throw std::invalid_argument("stage partition: need at least one chunk, got " + std::to_string(total_chunks));
  const auto n = static_cast<std::size_t>(total_chunks);
  if (total_layers < n)
    throw std::invalid_argument("stage partition: cannot split " + std::to_string(total_layers) + " layers into " +
                                std::to_string(n) + " chunks: every stage chunk needs at least one layer");
  std::vector<layer_range> ranges;
  for (const auto& r : even_ranges(total_layers, n)) ranges.push_back({r.begin, r.end});
  return ranges;
}

std::vector<layer_range> chunk_ranges_from_counts(const std::vector<std::size_t>& counts, std::size_t total_layers) {
  std::vector<layer_range> ranges;
  std::size_t begin = 0;
  for (std::size_t c = 0; c < counts.size(); ++c) {
    if (counts[c] == 0) throw std::invalid_argument("stage partition: chunk " + std::to_string(c) + " has no layers");
    ranges.push_back({begin, begin + counts[c]});
    begin += counts[c];
  }
  if (begin != total_layers)
    throw std::invalid_argument("stage partition: layer counts sum to " + std::to_string(begin) +
                                " but the model has " + std::to_string(total_layers) + " layers");
  return ranges;
}

stage_info get_stage_info(const std::vector<layer_range>& chunk_ranges, int stages, int rank) {
  if (stages <= 0 || rank < 0 || rank >= stages)
    throw std::invalid_argument("stage partition: rank " + std::to_string(rank) + " of " + std::to_string(stages) +
                                " stages");
  if (chunk_ranges.size() % static_cast<std::size_t>(stages) != 0)
    throw std::invalid_argument("stage partition: " + std::to_string(chunk_ranges.size()) +
                                " chunks do not divide over " + std::to_string(stages) + " stages");
  stage_info info;
  info.is_first_stage = rank == 0;
  info.is_last_stage = rank == stages - 1;
  for (std::size_t c = static_cast<std::size_t>(rank); c < chunk_ranges.size(); c += static_cast<std::size_t>(stages)) {
    info.chunks.push_back(static_cast<int>(c));
    info.layer_ranges_per_chunk.push_back(chunk_ranges[c]);
  }
  return info;
}

stage_info get_stage_info(std::size_t total_layers, int stages, int rank, int chunks_per_stage) {
  if (chunks_per_stage <= 0)
    throw std::invalid_argument("stage partition: chunks per stage must be positive, got " +
                                std::to_string(chunks_per_stage));
  if (stages <= 0) throw std::invalid_argument("stage partition: stages must be positive, got " + std::to_string(stages));
  return get_stage_info(uniform_chunk_ranges(total_layers, stages * chunks_per_stage), stages, rank);
}

std::string to_string(const layer_range& r) {
  return r.end - r.begin == 1 ? "layer " + std::to_string(r.begin)
                              : "layers " + std::to_string(r.begin) + ".." + std::to_string(r.end - 1);
}

}  // namespace ap

// Which layers each stage holds (get_stage_info): uniform or from explicit layer counts.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace ap {

struct layer_range {
  std::size_t begin = 0, end = 0;  // half-open [begin, end) in the whole model
  bool operator==(const layer_range& o) const { return begin == o.begin && end == o.end; }
};

struct stage_info {
  bool is_first_stage = false;
  bool is_last_stage = false;
  std::vector<int> chunks;                           // global chunk ids held, in local order (see chunk layout)
  std::vector<layer_range> layer_ranges_per_chunk;  // one per held chunk
};

// Contiguous ranges for stages*chunks_per_stage chunks, as equal as possible (the first take the remainder).
// Throws std::invalid_argument naming the counts when a chunk would be empty.
std::vector<layer_range> uniform_chunk_ranges(std::size_t total_layers, int total_chunks);
// Ranges from explicit layer counts per chunk; the counts must be positive and sum to total_layers.
std::vector<layer_range> chunk_ranges_from_counts(const std::vector<std::size_t>& counts, std::size_t total_layers);

// Stage `rank` of `stages` (Note [chunk layout]).
stage_info get_stage_info(std::size_t total_layers, int stages, int rank, int chunks_per_stage = 1);
stage_info get_stage_info(const std::vector<layer_range>& chunk_ranges, int stages, int rank);

std::string to_string(const layer_range& r);  // "layers 3..5" (inclusive, for people)

}  // namespace ap

#include "collective/ring_schedule.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "collective/shard.hpp"

namespace ap {

namespace {

void check_place(int rank, int size, std::size_t chunk_elements) {
  if (size < 1 || rank < 0 || rank >= size)
    throw std::invalid_argument("ring schedule: rank " + std::to_string(rank) + " of " + std::to_string(size) +
                                " does not exist");
  if (chunk_elements == 0) throw std::invalid_argument("ring schedule: chunks of 0 elements");
}

// Elements [first, last) cut into chunks of up to `each`, all of step `step`.
std::vector<ring_chunk> cut(std::uint32_t step, std::size_t first, std::size_t last, std::size_t each) {
  std::vector<ring_chunk> out;
  for (std::size_t b = first; b < last; b += each)
    out.push_back({step, static_cast<std::uint32_t>(out.size()), b, std::min(last, b + each)});
  return out;
}

}  // namespace

ring_reduce_schedule::ring_reduce_schedule(int rank, int size, std::size_t units, std::size_t unit,
                                           std::size_t chunk_elements, int offset, bool then_gather)
    : rank_(rank), size_(size), units_(units), unit_(unit), chunk_elements_(chunk_elements), offset_(offset),
      steps_(static_cast<std::uint32_t>((size - 1) * (then_gather ? 2 : 1))) {
  check_place(rank, size, chunk_elements);
}

std::pair<std::size_t, std::size_t> ring_reduce_schedule::segment(long s) const {
  const long n = size_;
  const auto index = static_cast<std::size_t>(((s % n) + n) % n);
  const auto [first, last] = shard_rows(units_, static_cast<std::size_t>(n), index);
  return {first * unit_, last * unit_};
}

std::vector<ring_chunk> ring_reduce_schedule::chunks(std::uint32_t step, long s) const {
  const auto [first, last] = segment(s);
  return cut(step, first, last, chunk_elements_);
}

std::vector<ring_chunk> ring_reduce_schedule::first_sends() const {
  if (steps_ == 0) return {};
  return chunks(0, long(rank_) + offset_);
}

std::vector<ring_chunk> ring_reduce_schedule::receives(std::uint32_t step) const {
  return chunks(step, long(rank_) - long(step) - 1 + offset_);
}

int ring_gather_owner(int rank, int size, std::uint32_t step) {
  return static_cast<int>((long(rank) - long(step) - 1 + 2L * size) % size);
}

bool ring_gather_forwards(int size, std::uint32_t step) { return step + 2 < static_cast<std::uint32_t>(size); }

ring_broadcast_schedule::ring_broadcast_schedule(int rank, int size, int root, std::size_t n,
                                                 std::size_t chunk_elements) {
  check_place(rank, size, chunk_elements);
  chunks = cut(0, 0, n, chunk_elements);
  position = (rank - root + size) % size;
  ranks = size;
}

}  // namespace ap

// The ring's schedule (Note [ring collectives]): which chunk each rank sends, receives and does with it at each
// step; no sockets.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace ap {

// Elements [begin, end) of a rank's buffer, chunk `chunk` of ring step `step`.
struct ring_chunk {
  std::uint32_t step = 0, chunk = 0;
  std::size_t begin = 0, end = 0;
  std::size_t size() const { return end - begin; }
};

// A reduce-scatter over `units` rows of `unit` floats in `size` segments (shard_rows), then, for an all-reduce, an
// all-gather. At step s rank r receives segment (r - s - 1 + offset) mod size, adds it (reduce-scatter) or copies it
// (all-gather), and forwards it chunk by chunk; step 0 sends segment (r + offset). Afterwards rank r holds segment
// (r + 1 + offset) complete: offset -1 makes that its own shard (reduce_scatter).
class ring_reduce_schedule {
 public:
  // Throws std::invalid_argument for a rank outside [0, size) or a chunk of no element.
  ring_reduce_schedule(int rank, int size, std::size_t units, std::size_t unit, std::size_t chunk_elements, int offset,
                       bool then_gather);

  std::uint32_t steps() const { return steps_; }
  // Step 0's chunks, sent before this rank receives anything.
  std::vector<ring_chunk> first_sends() const;
  // The chunks received at `step`, in the order they arrive.
  std::vector<ring_chunk> receives(std::uint32_t step) const;
  // Whether a chunk received at `step` is added (reduce-scatter) or replaces (all-gather).
  bool adds(std::uint32_t step) const { return step + 1 < static_cast<std::uint32_t>(size_); }
  // Whether `step` is its segment's last add (where a mean divides).
  bool completes(std::uint32_t step) const { return step + 2 == static_cast<std::uint32_t>(size_); }
  // Whether a chunk received at `step` is forwarded as step + 1's.
  bool forwards(std::uint32_t step) const { return step + 1 < steps_; }
  // Elements [begin, end) of segment s (mod size).
  std::pair<std::size_t, std::size_t> segment(long s) const;

 private:
  std::vector<ring_chunk> chunks(std::uint32_t step, long segment) const;

  int rank_, size_;
  std::size_t units_, unit_, chunk_elements_;
  int offset_;
  std::uint32_t steps_;
};

// An all-gather: at step s rank r receives rank (r - s - 1) mod size's piece, whole, and forwards it unless last.
int ring_gather_owner(int rank, int size, std::uint32_t step);
bool ring_gather_forwards(int size, std::uint32_t step);

// A broadcast down the chain root, root + 1, ... (mod size), in chunks of n floats.
struct ring_broadcast_schedule {
  ring_broadcast_schedule(int rank, int size, int root, std::size_t n, std::size_t chunk_elements);
  bool receives() const { return position > 0; }
  bool sends() const { return position + 1 < ranks; }
  std::vector<ring_chunk> chunks;
  int position = 0, ranks = 1;  // place along the chain (root: 0), chain length
};

}  // namespace ap

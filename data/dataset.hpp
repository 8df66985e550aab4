// A labelled data set in memory, and seeded shuffling into batches.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tensor/tensor.hpp"

namespace ap {

struct dataset {
  std::string name;
  tensor inputs;  // (samples, features), e.g. (60000, 784) with pixels scaled to [0, 1]
  tensor labels;  // (samples) or (samples, sequence): class indices stored as floats (exact below 2^24)
  std::size_t num_classes = 0;
  std::size_t size() const { return inputs.dimension() == 0 ? 0 : inputs.shape()[0]; }
};

struct batch {
  tensor inputs;  // (batch, features)
  tensor labels;  // (batch) or (batch, sequence)
};

// The sample order of one epoch: a permutation of [0, n) from a seeded generator of our own
// (not std::shuffle), identical on every platform for the same (seed, epoch).
std::vector<std::size_t> epoch_order(std::size_t n, std::uint64_t seed, std::uint64_t epoch);

// Batch number `index` of an epoch order: samples order[index*batch_size, ...), the last one may be smaller.
batch make_batch(const dataset& d, const std::vector<std::size_t>& order, std::size_t index,
                 std::size_t batch_size);
std::size_t batch_count(std::size_t samples, std::size_t batch_size);

}  // namespace ap

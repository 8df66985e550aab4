// A labelled data set in memory, and seeded shuffling into batches.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tensor/tensor.hpp"

namespace ap {

struct dataset {
  std::string name;
  tensor inputs;  // (samples, features), e.g. (60000, 784) in [0, 1]
  tensor labels;  // (samples) or (samples, sequence): class indices as floats (exact below 2^24)
  std::size_t num_classes = 0;
  std::size_t size() const { return inputs.dimension() == 0 ? 0 : inputs.shape()[0]; }
};

struct batch {
  tensor inputs;  // (batch, features)
  tensor labels;  // (batch) or (batch, sequence)
};

// Note [lazy epoch order]: an epoch's sample order is a seeded bijection of [0, n) computed per position, so
// 10^9 windows need no vector of indices: a 4-round Feistel network on [0, 4^h) (the smallest such range
// holding n), restricted to [0, n) by cycle walking. Plain 64-bit integer arithmetic, so the order is the same
// on every platform for the same (n, seed, epoch).
class sample_order {
 public:
  sample_order(std::size_t n, std::uint64_t seed, std::uint64_t epoch);
  std::size_t size() const { return n_; }
  std::size_t operator[](std::size_t i) const;

 private:
  std::uint64_t permute(std::uint64_t x) const;
  std::size_t n_;
  std::uint64_t key_;
  unsigned half_bits_;
  std::uint64_t half_mask_;
};

// The sample order of one epoch as a vector (Note [lazy epoch order]).
std::vector<std::size_t> epoch_order(std::size_t n, std::uint64_t seed, std::uint64_t epoch);

// Batch `index` of an epoch order: order[index*batch_size, ...); the last may be smaller.
batch make_batch(const dataset& d, const std::vector<std::size_t>& order, std::size_t index,
                 std::size_t batch_size);
std::size_t batch_count(std::size_t samples, std::size_t batch_size);

}  // namespace ap

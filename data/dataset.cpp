#include "data/dataset.hpp"

#include <algorithm>
#include <stdexcept>
#include <utility>

#include "data/data_source.hpp"
#include "random/seeded_random.hpp"

namespace ap {

// See Note [lazy epoch order].
sample_order::sample_order(std::size_t n, std::uint64_t seed, std::uint64_t epoch)
    : n_(n), key_(mix_seed(seed, epoch)), half_bits_(1) {
  while (half_bits_ < 32 && (std::uint64_t{1} << (2 * half_bits_)) < n) ++half_bits_;
  half_mask_ = (std::uint64_t{1} << half_bits_) - 1;
}

std::uint64_t sample_order::permute(std::uint64_t x) const {
  std::uint64_t left = x >> half_bits_, right = x & half_mask_;
  for (std::uint64_t round = 0; round < 4; ++round) {
    const std::uint64_t next = left ^ (hash_counters(key_, round, right, 0x0fde) & half_mask_);
    left = right;
    right = next;
  }
  return (left << half_bits_) | right;
}

std::size_t sample_order::operator[](std::size_t i) const {
  if (i >= n_)
    throw std::out_of_range("sample_order: position " + std::to_string(i) + " of an order of " + std::to_string(n_) +
                            " samples");
  std::uint64_t x = permute(i);
  while (x >= n_) x = permute(x);  // cycle walking: the cycle through i returns into [0, n)
  return static_cast<std::size_t>(x);
}

std::vector<std::size_t> epoch_order(std::size_t n, std::uint64_t seed, std::uint64_t epoch) {
  const sample_order lazy(n, seed, epoch);
  std::vector<std::size_t> order(n);
  for (std::size_t i = 0; i < n; ++i) order[i] = lazy[i];
  return order;
}

std::size_t batch_count(std::size_t samples, std::size_t batch_size) {
  if (batch_size == 0) throw std::invalid_argument("batch_count: batch_size must be positive");
  return samples / batch_size + (samples % batch_size != 0);
}

batch make_batch(const dataset& d, const std::vector<std::size_t>& order, std::size_t index,
                 std::size_t batch_size) {
  const std::size_t count = batch_count(order.size(), batch_size);
  if (index >= count)
    throw std::out_of_range("make_batch: batch index " + std::to_string(index) + " out of range: " +
                            std::to_string(count) + " batches of " + std::to_string(batch_size) +
                            " in an order of " + std::to_string(order.size()) + " samples");
  if (d.labels.dimension() == 0 || d.labels.shape()[0] != d.size())
    throw std::invalid_argument("make_batch: data set '" + d.name + "' has inputs " + shape_string(d.inputs) +
                                " but labels " + shape_string(d.labels));
  const std::size_t begin = index * batch_size;
  return dataset_view(d)->gather(order.data() + begin, std::min(batch_size, order.size() - begin));
}

}  // namespace ap

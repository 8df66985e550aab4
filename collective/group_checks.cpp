#include "collective/group_checks.hpp"

#include <stdexcept>

#include "collective/shard.hpp"

namespace ap {

tensor reduce_scatter_output(const std::string& group, const tensor& in, const tensor& out, int size, int rank) {
  if (&in == &out) throw std::invalid_argument("group '" + group + "' reduce_scatter: in and out must be different tensors");
  shape_t shard = in.shape();
  if (!shard.empty()) {
    const auto [first, last] = shard_rows(shard[0], static_cast<std::size_t>(size), static_cast<std::size_t>(rank));
    shard[0] = last - first;
  }
  return tensor::from_shape(shard);
}

void check_all_gather(const std::string& group, const tensor& in, const tensor& out) {
  if (&in == &out) throw std::invalid_argument("group '" + group + "' all_gather: in and out must be different tensors");
  if (in.dimension() == 0) throw std::invalid_argument("group '" + group + "' all_gather: a scalar has no rows to gather");
}

void check_broadcast_root(const std::string& group, int root, int size) {
  if (root < 0 || root >= size)
    throw std::out_of_range("group '" + group + "' broadcast from root " + std::to_string(root) +
                            ": the group has ranks 0.." + std::to_string(size - 1));
}

}  // namespace ap

#include "collective/lone_rank_group.hpp"

#include <stdexcept>
#include <vector>

#include "collective/shard.hpp"

namespace ap {

lone_rank_group::lone_rank_group(std::string name, int rank, int size) : name_(std::move(name)), rank_(rank), size_(size) {
  if (size < 1 || rank < 0 || rank >= size)
    throw std::invalid_argument("group '" + name_ + "': rank " + std::to_string(rank) + " of " + std::to_string(size) +
                                " does not exist");
}

collective_handle lone_rank_group::all_reduce(tensor&, reduce_op) { return collective_handle(); }

collective_handle lone_rank_group::reduce_scatter(const tensor& in, tensor& out, reduce_op) {
  const std::size_t rows = in.dimension() == 0 ? 1 : in.shape()[0];
  const auto [first, last] = shard_rows(rows, static_cast<std::size_t>(size_), static_cast<std::size_t>(rank_));
  out = in.dimension() == 0 ? in : slice_rows(in, first, last);
  return collective_handle();
}

collective_handle lone_rank_group::all_gather(const tensor& in, tensor& out) {
  out = concat_rows(std::vector<const tensor*>(static_cast<std::size_t>(size_), &in));
  return collective_handle();
}

collective_handle lone_rank_group::broadcast(tensor&, int root) {
  if (root < 0 || root >= size_)
    throw std::invalid_argument("group '" + name_ + "' broadcast: root " + std::to_string(root) + " is not a rank of " +
                                std::to_string(size_));
  return collective_handle();
}

}  // namespace ap

// The checks every group across processes runs before a collective, one text each, the group's name first.
#pragma once

#include <string>

#include "tensor/tensor.hpp"

namespace ap {

// reduce_scatter's `out` for this rank: `in`'s shape with this rank's rows (shard_rows). Throws
// std::invalid_argument when in and out are one tensor.
tensor reduce_scatter_output(const std::string& group, const tensor& in, const tensor& out, int size, int rank);
// Throws std::invalid_argument when in and out are one tensor or `in` is a scalar (no rows to gather).
void check_all_gather(const std::string& group, const tensor& in, const tensor& out);
// Throws std::out_of_range when `root` is not a rank of a group of `size`.
void check_broadcast_root(const std::string& group, int root, int size);

}  // namespace ap

// One rank of a group of several, computing alone: every collective returns at once with the shapes a real group
// would give and none of the values. For measuring what a rank holds (Note [tensor-parallel memory]).
#pragma once

#include <string>

#include "collective/process_group.hpp"

namespace ap {

class lone_rank_group final : public process_group {
 public:
  // Rank `rank` of `size` (throws std::invalid_argument for a rank outside the group).
  lone_rank_group(std::string name, int rank, int size);

  const std::string& name() const override { return name_; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  collective_handle all_reduce(tensor& t, reduce_op op = reduce_op::sum) override;  // t unchanged
  collective_handle reduce_scatter(const tensor& in, tensor& out, reduce_op op = reduce_op::sum) override;  // this rank's rows of in
  collective_handle all_gather(const tensor& in, tensor& out) override;  // in, stacked size times
  collective_handle broadcast(tensor& t, int root) override;              // t unchanged
  void abort(const std::string&) override {}

 private:
  std::string name_;
  int rank_, size_;
};

}  // namespace ap

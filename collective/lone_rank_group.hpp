// One rank of a group of several, computing alone: every collective returns at once, with the shapes a real
// group would give and none of the values. For what a rank holds, not what it computes: the memory model
// measures a tensor-parallel rank's stash on a model joined to one (Note [tensor-parallel memory] in
// model/tensor_parallel.hpp).
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

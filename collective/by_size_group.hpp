// A network_group of two backends, chosen per collective by size (Note [collectives by size]).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "collective/network_group.hpp"

namespace ap {

// Note [collectives by size]: each collective goes to `small` below threshold_bytes and to `large` from it (4 MB:
// where the ring and gloo crossed before the ring had data links; the ring is now the default, Note [collective
// backends]). The size is one the ranks share (an all-reduce's, a broadcast's, a reduce-scatter's input), so every
// rank picks the same group and each group sees the same sequence of collectives. An all-gather's inputs may differ
// by rank: it always goes to `small`. Ranks whose tensors differ in size may here call different groups and fail by
// their timeout instead of by name.
class by_size_group final : public network_group {
 public:
  static constexpr std::size_t default_threshold_bytes = std::size_t{4} << 20;
  // Both of the same group (name, rank, size); throws std::invalid_argument otherwise.
  by_size_group(std::unique_ptr<network_group> small, std::unique_ptr<network_group> large,
                std::size_t threshold_bytes = default_threshold_bytes);

  const std::string& name() const override;
  int rank() const override;
  int size() const override;
  // The two groups' endpoints, separated by one space (neither holds one).
  std::string endpoint() const override;
  void connect(const std::vector<std::string>& endpoints) override;

  collective_handle all_reduce(tensor& t, reduce_op op = reduce_op::sum) override;
  collective_handle reduce_scatter(const tensor& in, tensor& out, reduce_op op = reduce_op::sum) override;
  collective_handle all_gather(const tensor& in, tensor& out) override;
  collective_handle broadcast(tensor& t, int root) override;
  void abort(const std::string& reason) override;

  // The group a collective of `bytes` runs on.
  network_group& group_for(std::size_t bytes);

 private:
  std::unique_ptr<network_group> small_, large_;
  std::size_t threshold_;
};

}  // namespace ap

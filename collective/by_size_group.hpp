// A network_group of two backends, each collective on the one that moves its size faster (Note [collective
// backends]): our ring below a size, gloo from it.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "collective/network_group.hpp"

namespace ap {

// Note [collectives by size]: `bench_network allreduce` between processes on loopback, plain TCP (both with the quiet
// scheduler of Note [quiet scheduler], as on a node), bus GB/s at 1 / 2 / 4 / 8 / 16 / 32 / 64 MB: 2 processes, our
// ring 1.13 / 0.99 / 1.05 / 1.12 / 1.15 / 1.10 / 1.32, gloo 0.27 / 0.90 / 0.97 / 1.09 / 1.48 / 1.48 / 1.34; 4
// processes, the ring 0.39 / 0.36 / 0.44 / 0.42 / 0.50 / 0.40 / 0.31, gloo 0.34 / 0.46 / 0.45 / 0.68 / 0.82 / 0.87 /
// 0.87. The two cross at about 4 MB; below it gloo's latency dominates (a GPT's gradients are mostly tensors of 1 MB
// and less: D = 2 on 2 nodes stepped 9-19% faster on the ring), above it gloo's streaming (the heavy MLP's 16 MB
// weights: 6-9% faster on gloo). Since the ring's data links (Note [data links]) the ring is faster at all but one
// size measured (Note [collective backends]) and is the default; by-size stays a choice. Each collective goes to
// `small` below threshold_bytes and to `large` from it. Its size is one the ranks share (an all-reduce's, a
// broadcast's, a reduce-scatter's input: equal on every rank by the collectives' contract), so every rank picks the
// same group, and each group sees the same sequence of collectives on every rank. An all-gather's inputs may differ
// by rank: it always goes to `small`. Ranks whose tensors differ in size, which a group refuses by name, may here
// call different groups and fail by their timeout instead.
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

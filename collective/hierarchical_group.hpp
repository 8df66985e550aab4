// A network_group whose ranks may share processes: co-located ranks reduce through shared memory first, and
// only one rank per process crosses the network (Note [hierarchical collectives]).
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "collective/colocation.hpp"
#include "collective/network_group.hpp"

namespace ap {

class local_group;
struct hierarchical_state;

// Note [hierarchical collectives]: several ranks of one group may share a process (Note [data-parallel nodes]); a
// flat group would send each over loopback. Here an all-reduce sums within the process through a local_group, the
// process leaders (lowest ranks) all-reduce over `inner`, and each leader broadcasts back. Every rank gets the same
// bits. The other collectives are built on the all-reduce exactly, with zeros from the other ranks (a -0.0 arrives
// as +0.0). Any failure aborts both parts, so every rank fails at once.
class hierarchical_group final : public network_group {
 public:
  // `inner`: one rank per process, for the leader (local_rank 0) when the group spans processes; else null.
  hierarchical_group(std::string name, int rank, int size, colocated_rank place, const std::string& process_key,
                     std::unique_ptr<network_group> inner, std::chrono::milliseconds timeout);
  ~hierarchical_group() override;
  hierarchical_group(const hierarchical_group&) = delete;
  hierarchical_group& operator=(const hierarchical_group&) = delete;

  const std::string& name() const override;
  int rank() const override;
  int size() const override;
  // "leader <inner endpoint>" from a process's leader, "member" from its other ranks.
  std::string endpoint() const override;
  // Takes the leaders' endpoints (in rank order, one per process) and connects `inner` with them.
  void connect(const std::vector<std::string>& endpoints) override;

  collective_handle all_reduce(tensor& t, reduce_op op = reduce_op::sum) override;
  collective_handle reduce_scatter(const tensor& in, tensor& out, reduce_op op = reduce_op::sum) override;
  collective_handle all_gather(const tensor& in, tensor& out) override;
  collective_handle broadcast(tensor& t, int root) override;
  void abort(const std::string& reason) override;

 private:
  std::shared_ptr<hierarchical_state> state_;
};

}  // namespace ap

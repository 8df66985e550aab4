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

// Note [hierarchical collectives]: D data-parallel replicas on N < D nodes put several ranks of one group in
// one node process (Note [data-parallel nodes] in actors/data_parallel_pipeline.cpp). A flat network group
// would send every one of them over loopback sockets. Here an all-reduce runs in three steps, in order, on
// the member's own communication thread (Note [communication thread]):
//   1. the ranks of each process sum through a local_group (shared memory, Note [local collectives]);
//   2. each process's leader (its lowest rank) all-reduces that sum with the other leaders over `inner`, a
//      network_group of one rank per process (ring or gloo: Note [collective backends]);
//   3. each leader broadcasts the result to its process's ranks through the local_group.
// Every rank ends with the leaders' bits (the same on every rank); the sum's order differs from a flat
// ring's, within rounding. Only the all-reduce crosses machines natively; the other collectives are built
// on it exactly: a broadcast is an all-reduce in which every rank but the root gives zeros; an all-gather
// places each rank's rows at its offset in zeros (row counts and widths all-reduced first); a reduce-scatter
// keeps this rank's rows of an all-reduce. (Adding zeros is exact, but a -0.0 arrives as +0.0.)
// The process's ranks find their local_group by `process_key` (the same text for the ranks of one process
// and one placement: Note [data-parallel nodes]); a key whose group has handed every rank starts a new one.
// Any failure aborts the local group and `inner`, so every rank of the group fails at once.
class hierarchical_group final : public network_group {
 public:
  // `inner`: the network_group of the group's processes, given to the process's leader (local_rank 0) when
  // the group spans more than one process; null otherwise.
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

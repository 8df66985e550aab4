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

// Note [hierarchical collectives]: D data-parallel replicas on N < D nodes put several ranks of one group in one
// process (Note [data-parallel nodes]); a flat network group would send each over loopback sockets. Here an
// all-reduce runs on the member's communication thread in three steps: the process's ranks sum through a
// local_group (Note [local collectives]); each process's leader (lowest rank) all-reduces that sum with the other
// leaders over `inner`, one rank per process; each leader broadcasts the result to its ranks. Every rank gets the
// same bits (within rounding of a flat ring's). The other collectives are built on the all-reduce exactly: a
// broadcast where non-roots give zeros, an all-gather of rows placed in zeros, a reduce-scatter keeping this rank's
// rows (a -0.0 arrives as +0.0). Ranks find their local_group by `process_key`. Any failure aborts the local group
// and `inner`, so every rank fails at once.
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

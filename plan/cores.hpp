// Where the compute ranks of a process run: how many intra-op threads each takes and which cores
// (Note [cores per rank]), decided before anything starts.
#pragma once

#include <string>
#include <vector>

#include "tensor/compute.hpp"

namespace ap {

// The cores this process may run on (its affinity mask: taskset, a container's cpuset), in order.
std::vector<int> process_cores();

// `ranks` compute ranks on `cores`, each with `threads` intra-op threads (0: the cores divided evenly, at least
// 1). When ranks x threads <= cores, rank i is pinned to the i-th run of `threads` cores, so no two ranks share a
// core; otherwise none is pinned. Throws std::invalid_argument for ranks < 1 or threads < 0.
std::vector<compute_cores> assign_cores(const std::vector<int>& cores, int ranks, int threads);

// Note [cores by stage cost]: a pipeline runs at the pace of its slowest stage, and stages seldom cost the same.
// With --threads 0 `train` gives each stage of a pipeline in this process (no replicas, tensor-parallel ranks or
// nodes) a share of the cores in proportion to its predicted busy time (one thread's layer costs), every stage at
// least one. A stage's time does not fall in proportion to its threads, so this is an estimate; `--threads N`
// still gives every stage N.
//
// Threads per stage: every stage 1, the rest in proportion to `costs` (largest remainder, ties to the earlier
// stage); all 1 when the cores do not exceed the stages; even when every cost is 0. Throws
// std::invalid_argument for no stage or a negative or non-finite cost.
std::vector<int> threads_by_cost(const std::vector<double>& costs, int cores);
// Ranks with the given thread counts on `cores`, pinned as assign_cores pins.
std::vector<compute_cores> assign_cores(const std::vector<int>& cores, const std::vector<int>& threads);

// "cores 0-3", "cores 0,2,5", "core 4"; "1 thread, not pinned" / "2 threads, not pinned".
std::string cores_text(const compute_cores& c);

// The names of a run's compute ranks in the order of its core assignment (replica, stage, rank), leaving out a
// dimension of size 1: "replica 1 stage 0 rank 1", "stage 2", "replica 1"; one rank alone: "rank 0".
std::vector<std::string> rank_names(int replicas, int stages, int tensor_parallel);

// Note [cores on nodes]: stage s of replica d runs on node (d * stages + s) % nodes. The nodes of one machine (the
// same host in the node list) divide its cores among all the ranks they host together: each stage's slot is the
// index of its first rank among its machine's ranks, so each node pins its ranks to its own share and two nodes
// on one machine never pin to the same cores.
struct node_slot {
  int first_rank = 0;
  int node_ranks = 1;  // the ranks of the stage's machine, over all its nodes
};
// Replica d's stage s at d * stages + s; `node_hosts` by node (its machine).
std::vector<node_slot> node_slots(int replicas, int stages, int tensor_parallel, const std::vector<std::string>& node_hosts);

// The layout `train` prints: "stage 0: cores 0-3, stage 1: cores 4-7"; with nothing pinned, one line:
// "4 compute ranks x 1 thread on 2 cores, not pinned (more ranks x threads than cores)".
std::string cores_layout_text(const std::vector<std::string>& names, const std::vector<compute_cores>& placement,
                              std::size_t cores);

}  // namespace ap

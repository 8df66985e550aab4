// Where the compute ranks of a process run: intra-op threads and cores per rank (Note [cores per rank]).
#pragma once

#include <string>
#include <vector>

#include "tensor/compute.hpp"

namespace ap {

// The cores this process may run on (its affinity mask), in order.
std::vector<int> process_cores();

// `ranks` compute ranks, each with `threads` threads (0: the cores divided evenly, at least 1). When ranks x
// threads <= cores, rank i is pinned to the i-th run of `threads` cores; otherwise none is pinned. Throws
// std::invalid_argument for ranks < 1 or threads < 0.
std::vector<compute_cores> assign_cores(const std::vector<int>& cores, int ranks, int threads);

// Note [cores by stage cost]: a pipeline runs at the pace of its slowest stage, so with --threads 0 `train` gives
// each stage of a pipeline in this process cores in proportion to its predicted busy time (an estimate).
//
// Threads per stage: every stage 1, the rest in proportion to `costs` (largest remainder, ties to the earlier
// stage). Throws std::invalid_argument for no stage or a negative or non-finite cost.
std::vector<int> threads_by_cost(const std::vector<double>& costs, int cores);
// Ranks with the given thread counts on `cores`, pinned as assign_cores pins.
std::vector<compute_cores> assign_cores(const std::vector<int>& cores, const std::vector<int>& threads);

// "cores 0-3", "cores 0,2,5", "core 4"; "1 thread, not pinned" / "2 threads, not pinned".
std::string cores_text(const compute_cores& c);

// The names of a run's compute ranks in core-assignment order, leaving out dimensions of size 1:
// "replica 1 stage 0 rank 1", "stage 2", "replica 1"; one rank alone: "rank 0".
std::vector<std::string> rank_names(int replicas, int stages, int tensor_parallel);

// Note [cores on nodes]: stage s of replica d runs on node (d * stages + s) % nodes. The nodes of one host divide
// its cores among all the ranks they host together, so two nodes on one machine never pin to the same cores.
struct node_slot {
  int first_rank = 0;
  int node_ranks = 1;  // the ranks of the stage's machine, over all its nodes
};
// Replica d's stage s at d * stages + s; `node_hosts` by node (its machine).
std::vector<node_slot> node_slots(int replicas, int stages, int tensor_parallel, const std::vector<std::string>& node_hosts);

// The layout `train` prints: "stage 0: cores 0-3, stage 1: cores 4-7", or one line when nothing is pinned.
std::string cores_layout_text(const std::vector<std::string>& names, const std::vector<compute_cores>& placement,
                              std::size_t cores);

}  // namespace ap

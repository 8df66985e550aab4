// Where the compute ranks of a process run: how many intra-op threads each takes and which cores
// (Note [cores per rank] in tensor/compute.hpp), decided before anything starts.
#pragma once

#include <string>
#include <vector>

#include "tensor/compute.hpp"

namespace ap {

// The cores this process may run on (its affinity mask: taskset, a container's cpuset), in order.
std::vector<int> process_cores();

// `ranks` compute ranks on `cores`: each takes `threads` intra-op threads (0: the cores divided evenly, at
// least 1). When they fit (ranks x threads <= cores), rank i is pinned to the i-th run of `threads` cores of
// the list, so no two ranks share a core; when they do not, none is pinned and the system spreads them.
// Throws std::invalid_argument for ranks < 1 or threads < 0.
std::vector<compute_cores> assign_cores(const std::vector<int>& cores, int ranks, int threads);

// "cores 0-3", "cores 0,2,5", "core 4"; "1 thread, not pinned" / "2 threads, not pinned".
std::string cores_text(const compute_cores& c);

// The names of a run's compute ranks in the order of its core assignment (replica, then stage, then rank):
// "replica 1 stage 0 rank 1", leaving out a dimension of size 1 ("stage 2"), and stages altogether when
// `stages` is 0 (data and tensor parallelism without a pipeline: "replica 1"); one rank alone: "rank 0".
std::vector<std::string> rank_names(int replicas, int stages, int tensor_parallel);

// Note [cores on nodes]: stage s of replica d runs on node (d * stages + s) % nodes (the pipeline's and the
// data-parallel pipeline's placement), and a node divides its own cores among every rank it hosts. Each stage's
// slot: the index of its first rank among its node's ranks, and how many ranks that node hosts in all.
struct node_slot {
  int first_rank = 0;
  int node_ranks = 1;
};
// Replica d's stage s at d * stages + s.
std::vector<node_slot> node_slots(int replicas, int stages, int tensor_parallel, int nodes);

// The layout `train` prints: "stage 0: cores 0-3, stage 1: cores 4-7" for names {"stage 0", "stage 1"}; with
// nothing pinned, one line:
// "4 compute ranks x 1 thread on 2 cores, not pinned (more ranks x threads than cores)".
std::string cores_layout_text(const std::vector<std::string>& names, const std::vector<compute_cores>& placement,
                              std::size_t cores);

}  // namespace ap

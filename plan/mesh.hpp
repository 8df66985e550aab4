// The (data, pipeline, tensor) mesh of a run: D replicas x P stages x T tensor-parallel ranks, and where
// each runs. Pure: what `train` prints at start and refuses before anything is built.
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace ap {

struct mesh_shape {
  int data_parallel = 1;    // D: replicas of the whole pipeline
  int stages = 1;           // P: pipeline stages (1 without --stages)
  int tensor_parallel = 1;  // T: ranks (threads) per stage
};

// Replica d's stage s runs on node (d * stages + s) % nodes, its index in --nodes (Note [data-parallel nodes]).
std::size_t node_of(int replica, int stage, int stages, std::size_t nodes);

// "2 data-parallel replicas x 2 stages x 2 tensor-parallel ranks = 8 compute ranks; replica 0 stage 0:
// node 127.0.0.1:4000 (2 ranks), ...", and where some node holds several replicas of a stage, that their
// all-reduces meet in shared memory first (Note [hierarchical collectives]). Nodes as given to --nodes (node_of);
// empty: every thread in this process.
std::string describe_mesh(const mesh_shape& mesh, const std::vector<std::string>& nodes);

// Note [elastic mesh]: the mesh an elastic run (--elastic) continues on when `nodes_left` of the `nodes_listed`
// nodes it was planned on answer. The planned mesh kept D * P stage slots on the listed nodes; the new one keeps as
// many per node: D * P * left / listed slots, rounded down (but every slot while they are no more than the nodes
// left), taken from the replicas when there are several (P kept), else from the stages; T is kept. Where `fits`
// refuses a mesh (a schedule that needs more microbatches, say), the next smaller one is tried. nullopt: nothing
// fits, or no node is left. Never larger than the planned mesh, so nodes that answer again grow it back to it.
std::optional<mesh_shape> elastic_mesh(const mesh_shape& planned, std::size_t nodes_listed, std::size_t nodes_left,
                                       const std::function<bool(const mesh_shape&)>& fits);

// Refuses a size below 1, naming the flag (a node hosts any number of stages and ranks). Throws
// std::invalid_argument.
void check_mesh(const mesh_shape& mesh);

}  // namespace ap

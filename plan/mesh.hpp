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

// "2 data-parallel replicas x 2 stages x 2 tensor-parallel ranks = 8 compute ranks; replica 0 stage 0: node
// 127.0.0.1:4000 (2 ranks), ..." (Note [hierarchical collectives]). Empty nodes: all in this process.
std::string describe_mesh(const mesh_shape& mesh, const std::vector<std::string>& nodes);

// Note [elastic mesh]: the mesh an elastic run continues on when `nodes_left` of `nodes_listed` nodes answer: as
// many stage slots per node as planned (rounded down), taken from the replicas when there are several, else from
// the stages; T is kept. Where `fits` refuses, the next smaller mesh is tried; nullopt when nothing fits.
std::optional<mesh_shape> elastic_mesh(const mesh_shape& planned, std::size_t nodes_listed, std::size_t nodes_left,
                                       const std::function<bool(const mesh_shape&)>& fits);

// Refuses a size below 1, naming the flag (std::invalid_argument).
void check_mesh(const mesh_shape& mesh);

}  // namespace ap

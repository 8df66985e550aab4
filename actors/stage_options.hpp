// What every stage of a pipeline runs with: the part of pipeline_options that reaches the stages.
// Note [stage options]: a pipeline hands this struct to each stage's setup as it is, and a stage on a node gets
// it inside its stage_spec through one inspect (actors/messages.hpp); where a stage runs is stage_place. A new
// stage setting is one field here, plus its line in that inspect and its use.
#pragma once

#include <chrono>
#include <string>

#include "collective/colocation.hpp"
#include "collective/network_group.hpp"
#include "failure/timeout.hpp"
#include "model/optimizer.hpp"
#include "plan/cores.hpp"
#include "tensor/dtype.hpp"

namespace ap {

struct stage_options {
  optimizer_config optimizer;     
  std::chrono::milliseconds timeout = default_timeout;  // longest wait on a peer
  // bfloat16 computes, stashes and sends in bfloat16; master weights and optimizer stay float32
  // (Note [compute dtype]). Overrides the model's dtype.
  dtype compute_dtype = dtype::float32;
  // Each stage's chunks split over this many ranks (Note [tensor-parallel stage]).
  int tensor_parallel = 1;
  // Intra-op threads per rank (Note [cores per rank]); 0: the cores divided among the ranks.
  int threads = 0;
  // Set by data_parallel_pipeline (Note [data-parallel stage]).
  int replica = 0;
  int replicas = 1;  // Note [data-parallel nodes]
  // Backend of those groups' collectives; gloo only without TLS (Note [collective backends]).
  collective_backend collectives = collective_backend::ring;
  // The key of a placement of replicas on nodes, same for every replica (Note [hierarchical collectives]).
  std::string data_parallel_key;
  // Set by the pipeline (Note [vocab-parallel]).
  bool split_vocabulary = false;
  // Note [sequence parallelism]
  bool sequence_parallel = false;
};

// Where one stage runs, worked out per stage by its pipeline; all defaults in the coordinator's process.
struct stage_place {
  // On a node, the stage's first rank among all ranks its machine hosts (Note [cores on nodes]).
  node_slot slot;
  // With replicas > 1, the group endpoints' host; empty: none (Note [data-parallel nodes]).
  std::string data_parallel_host;
  // This replica's place among the replicas whose stage shares its node (Note [hierarchical collectives]).
  colocated_rank data_parallel_place;
  // Its activation inbox's host; empty: tensors travel in messages (Note [activations on data links]).
  std::string link_host;
  bool report_events = false;  // Note [events from nodes]
};

}  // namespace ap

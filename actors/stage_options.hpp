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
  optimizer_config optimizer;       // every stage builds its own optimizer from it
  std::chrono::milliseconds timeout = default_timeout;  // longest wait on a peer before the step fails
  // bfloat16 computes, stashes and sends in bfloat16; master weights and optimizer stay float32
  // (Note [compute dtype]). Overrides the model's dtype.
  dtype compute_dtype = dtype::float32;
  // Each stage's chunks split over this many ranks (Note [tensor-parallel stage]).
  int tensor_parallel = 1;
  // Intra-op threads per rank (Note [cores per rank]); 0: the cores divided among the P x T ranks. On nodes, each
  // node assigns its own cores, with its own --threads if given (Note [cores on nodes]).
  int threads = 0;
  // This pipeline's replica among `replicas`; set by data_parallel_pipeline (Note [data-parallel stage]).
  int replica = 0;
  int replicas = 1;  // with nodes: Note [data-parallel nodes] (each stage opens its own group endpoints)
  // Backend of those groups' collectives; gloo only without TLS (Note [collective backends]).
  collective_backend collectives = collective_backend::ring;
  // The key of a placement of replicas on nodes, same for every replica (Note [hierarchical collectives]).
  std::string data_parallel_key;
  // Vocabulary split over the tensor-parallel ranks, loss in the last stage (Note [vocab-parallel]); set by the
  // pipeline.
  bool split_vocabulary = false;
  // The tensor-parallel ranks divide the blocks' rows between split Linears (Note [sequence parallelism]).
  bool sequence_parallel = false;
};

// Where one stage runs, worked out per stage by its pipeline; all defaults in the coordinator's process.
struct stage_place {
  // On a node, the stage's first rank among all ranks its machine hosts (Note [cores on nodes]).
  node_slot slot;
  // With replicas > 1, one network_group endpoint per tensor-parallel rank on this host; empty: none
  // (Note [data-parallel nodes]).
  std::string data_parallel_host;
  // This replica's place among the replicas whose stage shares its node (Note [hierarchical collectives]).
  colocated_rank data_parallel_place;
  // The host its activation inbox listens on; empty: tensors travel inside messages
  // (Note [activations on data links]).
  std::string link_host;
  bool report_events = false;  // send the step's events with stage_done (Note [events from nodes])
};

}  // namespace ap

// What every stage of a pipeline runs with: the settings of pipeline_options (actors/pipeline.hpp) that reach
// the stages, written once.
// Note [stage options]: a pipeline hands this part of its options to each stage's
// setup as it is (stage_setup::options, actors/stage_spawner.hpp), and a stage on a node gets it inside its
// stage_spec through one inspect (actors/messages.hpp), the same struct on both paths; where a stage is (its
// node's hosts, its slot and place among the ranks there) is stage_place, which the pipeline works out per
// stage. A new stage setting is one field here, plus its line in that inspect and its use.
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
  // Note [compute dtype] in model/layer.hpp: bfloat16 computes and stashes in bfloat16 and sends
  // activations and gradients between stages in bfloat16; master weights and optimizer stay float32.
  // It overrides the dtype set on the model passed in.
  dtype compute_dtype = dtype::float32;
  // Note [tensor-parallel stage] in stage/stage_compute.hpp: each stage runs its chunks split over this many
  // ranks (threads, in this process or on the stage's node), its Linear pairs column/row-parallel.
  int tensor_parallel = 1;
  // Note [cores per rank] in tensor/compute.hpp: intra-op threads of each stage's each rank (0: this process's
  // cores divided evenly among its P x T ranks), pinned to disjoint cores where they fit. Stages on nodes: each
  // node assigns its own cores, with these threads unless its own --threads (Note [cores on nodes]).
  int threads = 0;
  // This pipeline's replica among `replicas`; set by data_parallel_pipeline (Note [data-parallel stage]).
  int replica = 0;
  int replicas = 1;  // with nodes: Note [data-parallel nodes] (each stage opens its own group endpoints)
  // What runs those groups' collectives; gloo only without TLS (security.insecure),
  // refused otherwise before any stage is placed (Note [collective backends]).
  collective_backend collectives = collective_backend::ring;
  // The key of a placement of replicas on nodes (the same for every replica of
  // one placement); set by data_parallel_pipeline (Note [hierarchical collectives]).
  std::string data_parallel_key;
  // Note [vocab-parallel] in model/vocab_parallel.hpp: the stages split the vocabulary over their tensor-parallel
  // ranks and the last one computes the loss; set by the pipeline (cross-entropy on a language model, T > 1).
  bool split_vocabulary = false;
  // Note [sequence parallelism] in model/sequence_parallel.hpp: the tensor-parallel ranks divide the rows of the
  // blocks between their split Linears.
  bool sequence_parallel = false;
};

// Where one stage runs, worked out by its pipeline for each stage (Note [stage options]); all defaults for a stage
// in the coordinator's process.
struct stage_place {
  // On a node, the stage's first rank among all the ranks its machine hosts (over every
  // node there), of node_ranks; the node divides its cores among them (Note [cores on nodes]).
  node_slot slot;
  // With replicas > 1, the stage opens one network_group endpoint (its `collectives` backend's) per tensor-parallel
  // rank on this host, its node's own; empty: it opens none (Note [data-parallel nodes]).
  std::string data_parallel_host;
  // This replica's place among the replicas whose stage shares its node (Note [hierarchical collectives]).
  colocated_rank data_parallel_place;
  // The host its activation inbox listens on (the host the coordinator reaches
  // its node by); empty: it takes every tensor inside its message (Note [activations on data links]).
  std::string link_host;
  bool report_events = false;  // send the step's events with stage_done (Note [events from nodes])
};

}  // namespace ap

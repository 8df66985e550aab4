// How a stage comes to life: its three actors (retriever, processor, sender, pipeline_actors.hpp) spawned
// from the same pieces whether the stage runs in the coordinator's process or on a node. A node receives
// the pieces as a stage_spec: layers as spec texts plus their weights, so it needs no training config.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <caf/all.hpp>

#include "stage/event_log.hpp"
#include "network/messages.hpp"
#include "model/optimizer.hpp"
#include "model/sequential.hpp"
#include "schedule/schedule.hpp"

namespace ap {

struct stage_actors {
  caf::actor retriever, processor, sender;
};

// Everything one stage needs to run.
struct stage_setup {
  int stage = 0;
  int stages = 1;
  int total_chunks = 1;
  std::vector<int> chunk_ids;        // global chunk ids held, in local order
  std::vector<sequential> slices;    // one per chunk, with its weights
  optimizer_config optimizer;
  std::vector<action> actions;       // this stage's row of the schedule
  std::chrono::milliseconds timeout{30000};
  std::shared_ptr<event_log> log;    // may be null (always null on a node)
};

stage_actors spawn_stage(caf::actor_system& system, stage_setup setup);

// The wire form of a stage_setup (coordinator -> node). The node answers with the stage's retriever,
// processor and sender.
struct stage_spec {
  int stage = 0;
  int stages = 1;
  int total_chunks = 1;
  std::vector<int> chunk_ids;
  std::vector<std::vector<std::string>> layer_specs;  // per chunk: every layer's spec() text
  std::vector<std::uint64_t> first_layer;              // per chunk: global index of its first layer
  named_tensors weights;                               // every parameter of every chunk, by global name
  optimizer_config optimizer;
  std::vector<int> actions;  // 3 ints per action: op, microbatch, chunk (the stage is `stage`)
  std::int64_t timeout_ms = 30000;
};

// Layer spec texts and a copy of the weights; no actor, no log.
stage_spec make_stage_spec(stage_setup& setup);
// Rebuilds the layers and sets every weight; throws std::invalid_argument naming a bad layer text, a
// missing, extra or misshapen tensor, or a malformed action list.
stage_setup stage_setup_from_spec(stage_spec spec);

// The optimizer settings are written field by field here (not with an inspect of optimizer_config), so
// that this file is the one place that decides how they travel.
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, stage_spec& x) {
  auto& o = x.optimizer;
  return f(caf::meta::type_name("stage_spec"), x.stage, x.stages, x.total_chunks, x.chunk_ids, x.layer_specs,
           x.first_layer, x.weights, o.kind, o.lr, o.momentum, o.nesterov, o.beta1, o.beta2, o.eps, o.weight_decay,
           x.actions, x.timeout_ms);
}

}  // namespace ap

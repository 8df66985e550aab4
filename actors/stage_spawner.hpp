// How a stage comes to life: its three actors spawned from the same pieces in the coordinator's process or on a
// node, which receives them as a stage_spec (layers as spec texts plus weights, no training config).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <caf/all.hpp>

#include "collective/network_group.hpp"
#include "collective/process_group.hpp"
#include "stage/event_log.hpp"
#include "actors/messages.hpp"
#include "actors/stage_interfaces.hpp"
#include "failure/timeout.hpp"
#include "actors/stage_options.hpp"
#include "model/sequential.hpp"
#include "plan/cores.hpp"
#include "schedule/schedule.hpp"

namespace ap {

// A stage's three actors, by their typed interfaces (Note [typed stage interfaces]).
struct stage_actors {
  retriever_actor retriever;
  processor_actor processor;
  sender_actor sender;
  std::uint16_t link_port = 0;  // where its inbox listens (0: none) (Note [activations on data links])
};

// Everything one stage needs to run (Note [stage options]); the rest lives in this process only.
struct stage_setup {
  int stage = 0;
  int stages = 1;
  int total_chunks = 1;
  std::vector<int> chunk_ids;        // global chunk ids held, in local order
  std::vector<sequential> slices;    // one per chunk, with its weights; set to options.compute_dtype
  std::vector<action> actions;       // this stage's row of the schedule
  stage_options options;
  stage_place place;
  std::shared_ptr<event_log> log;    // may be null; on a node, the stage's own (Note [events from nodes])
  // Per tensor-parallel rank, its intra-op threads and cores; empty: one thread each (Note [cores per rank]).
  std::vector<compute_cores> cores;
  // Per tensor-parallel rank, its member of the stage's data-parallel group (Note [data-parallel stage]), in this
  // process only; empty: one replica, or a stage on a node (Note [data-parallel nodes]).
  std::vector<std::shared_ptr<process_group>> data_parallel_members;
  // Where its inbox and sender say what their links do (may be empty) (Note [activations on data links]).
  std::function<void(const std::string&)> link_log;
};

stage_actors spawn_stage(caf::actor_system& system, stage_setup setup);

// "data-parallel stage 1 rank 0" (no rank with T = 1): the group of stage `stage`'s rank `rank` across replicas.
inline constexpr const char* data_parallel_group_prefix = "data-parallel stage ";
std::string data_parallel_group_name(int stage, int rank, int tensor_parallel);

// Layer spec texts, a copy of the weights, the options and place as they are; no actor, no log.
stage_spec make_stage_spec(stage_setup& setup);
// Rebuilds the layers, sets every weight and places the ranks on this machine's cores (Note [cores on nodes];
// `node_threads` > 0 wins). Throws std::invalid_argument naming a bad layer text, a missing, extra or misshapen
// tensor, or a bad action.
stage_setup stage_setup_from_spec(stage_spec spec, int node_threads = 0);

}  // namespace ap

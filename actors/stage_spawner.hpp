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
  std::uint16_t link_port = 0;  // 0: none
};

// Everything one stage needs to run (Note [stage options]); the rest lives in this process only.
struct stage_setup {
  int stage = 0;
  int stages = 1;
  int total_chunks = 1;
  std::vector<int> chunk_ids;        // in local order
  std::vector<sequential> slices;    // one per chunk
  std::vector<action> actions;     
  stage_options options;
  stage_place place;
  std::shared_ptr<event_log> log;    // may be null
  // Per tensor-parallel rank, its intra-op threads and cores; empty: one thread each (Note [cores per rank]).
  std::vector<compute_cores> cores;
  // Per tensor-parallel rank, its data-parallel group member in this process (Note [data-parallel stage]).
  std::vector<std::shared_ptr<process_group>> data_parallel_members;
  // May be empty (Note [activations on data links]).
  std::function<void(const std::string&)> link_log;
};

stage_actors spawn_stage(caf::actor_system& system, stage_setup setup);

// "data-parallel stage 1 rank 0" (no rank with T = 1): the group of stage `stage`'s rank `rank` across replicas.
inline constexpr const char* data_parallel_group_prefix = "data-parallel stage ";
std::string data_parallel_group_name(int stage, int rank, int tensor_parallel);

// Layer spec texts, a copy of the weights, the options and place as they are; no actor, no log.
stage_spec make_stage_spec(stage_setup& setup);
// Rebuilds the layers and weights and places the ranks (Note [cores on nodes]); throws std::invalid_argument
// naming a bad layer text, tensor or action.
stage_setup stage_setup_from_spec(stage_spec spec, int node_threads = 0);

}  // namespace ap

// The actors of a pipeline and what each needs to start; each actor lives in its own file.
//   coordinator --forward_task--> stage 0 retriever -> processor -> sender --forward_task--> stage 1 ...
//   last stage sender --output--> coordinator: loss, gradient --backward_task--> last stage
// A stage is three actors: the retriever (orders tasks, Note [mailbox as the queue]), the processor (detached,
// one task at a time) and the sender (delivers, so compute never waits on delivery).

// Note [typed stage interfaces]: the retriever, processor, sender and coordinator are caf::typed_actor
// (actors/stage_interfaces.hpp), so a message a role does not accept is a compile error. Handles stay untyped
// only where CAF 0.17 forces it: the communicator's mixed endpoints, answers to current_sender() (actor_cast,
// unchecked), a node and its stage_spec answer (the handshake checked the protocol), and the blocking
// scoped_actor.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <caf/all.hpp>

#include "stage/event_log.hpp"
#include "actors/messages.hpp"
#include "network/activation_links.hpp"
#include "actors/stage_interfaces.hpp"
#include "failure/timeout.hpp"
#include "stage/stage_compute.hpp"
#include "schedule/schedule.hpp"

namespace ap {

class network_group;

// Rank numbering in a pipeline's communicator: stage s is rank s, the coordinator is rank `stages`.
inline int coordinator_rank(int stages) { return stages; }

// The sender of stage `stage`: builds its communicator from setup_atom's endpoints, then delivers. `log` (may be
// empty) hears when an activation link fails.
sender_actor spawn_sender(caf::actor_system& system, int stage, std::chrono::milliseconds timeout,
                          std::function<void(const std::string&)> log = {});

struct processor_config {
  int stage = 0;
  int stages = 1;
  int total_chunks = 1;
  sender_actor sender;
  std::shared_ptr<event_log> log;  // may be null
  dtype transfer_dtype = dtype::float32;  // Note [compute dtype]
  std::vector<std::shared_ptr<network_group>> rings;  // Note [data-parallel nodes]
  std::shared_ptr<activation_inbox> inbox;  // null in one process
};
processor_actor spawn_processor(caf::actor_system& system, processor_config config,
                                std::unique_ptr<stage_compute> compute);

struct retriever_config {
  int stage = 0;
  std::vector<action> actions;
  processor_actor processor;
  std::chrono::milliseconds timeout = default_timeout;  // longest wait for a peer's task while idle
  std::shared_ptr<event_log> log;
  bool report_events = false;  // Note [events from nodes]
};
retriever_actor spawn_retriever(caf::actor_system& system, retriever_config config);

// A weight tied between two stages (Note [tied weights] in model/weight_tie.hpp), by its names in each.
struct stage_tie {
  int owner_stage = 0;
  std::string owner;
  int copy_stage = 0;
  std::string copy;
};

struct coordinator_config {
  int stages = 1;
  int total_chunks = 1;
  int microbatches = 1;
  std::string loss = "cross_entropy";
  std::vector<retriever_actor> retrievers;
  std::vector<processor_actor> processors;
  std::chrono::milliseconds timeout = default_timeout;
  std::vector<std::string> stage_places;  // per stage, for errors
  bool whole_batch_backward = false;  // Note [sync-backward]
  // A node's stage events go here; per stage the node's clock offset (us) and its bound (Note [events from nodes]).
  std::shared_ptr<event_log> log;
  std::vector<double> clock_offset_us, clock_bound_us;
  float clip_grad_norm = 0.0f;  // Note [global gradient clipping]
  // Per stage, its activation link ("" for none) (Note [activations on data links]).
  std::vector<std::string> links;
  std::vector<stage_tie> ties;  // Note [tied gradients across stages]
  bool stage_loss = false;      // Note [loss in the last stage]
};
// Answers (train_atom, step, inputs, labels) with a step_result once every stage applied, or with the first
// failure after every stage dropped the step.
coordinator_actor spawn_coordinator(caf::actor_system& system, coordinator_config config);

}  // namespace ap

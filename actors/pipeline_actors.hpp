// The actors of a pipeline and what each needs to start. Each actor lives in its own file.
//
//   coordinator --forward_task--> stage 0 retriever -> processor -> sender --forward_task--> stage 1 ...
//   last stage sender --forward_task (output)--> coordinator: loss, gradient --backward_task--> last stage
//
// A stage is three actors: the retriever (its mailbox is the stage's queue; it holds tasks until they are
// the stage's next scheduled action), the processor (detached: computes exactly one task at a time) and the
// sender (hands results to the communicator, so compute never waits on delivery).
//
// With pipeline_options::nodes a stage's three actors run in an `actorpipe node` process (node.hpp); the
// coordinator and the other stages hold remote handles and use them exactly like local ones.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <caf/all.hpp>

#include "stage/event_log.hpp"
#include "actors/messages.hpp"
#include "failure/timeout.hpp"
#include "stage/stage_compute.hpp"
#include "schedule/schedule.hpp"

namespace ap {

class ring_group;

using setup_atom = caf::atom_constant<caf::atom("setup")>;  // endpoints of every rank, sent once at start

// Rank numbering in a pipeline's communicator: stage s is rank s, the coordinator is rank `stages`.
inline int coordinator_rank(int stages) { return stages; }

// The sender of stage `stage`: builds its communicator from the endpoints it is sent (setup_atom), then
// delivers deliver_forward and deliver_backward messages.
caf::actor spawn_sender(caf::actor_system& system, int stage, std::chrono::milliseconds timeout);

struct processor_config {
  int stage = 0;
  int stages = 1;
  int total_chunks = 1;
  caf::actor sender;
  std::shared_ptr<event_log> log;  // may be null
  dtype transfer_dtype = dtype::float32;  // of activations and gradients sent to other stages (Note [compute dtype])
  std::vector<std::shared_ptr<ring_group>> rings;  // Note [data-parallel nodes]: per rank; empty in one process
};
caf::actor spawn_processor(caf::actor_system& system, processor_config config, std::unique_ptr<stage_compute> compute);

struct retriever_config {
  int stage = 0;
  std::vector<action> actions;  // this stage's row of the schedule
  caf::actor processor;
  std::chrono::milliseconds timeout = default_timeout;  // longest wait for a peer's task while the processor is idle
  std::shared_ptr<event_log> log;
  bool report_events = false;  // Note [events from nodes]: send the log's events with stage_done (on a node)
};
caf::actor spawn_retriever(caf::actor_system& system, retriever_config config);

struct coordinator_config {
  int stages = 1;
  int total_chunks = 1;
  int microbatches = 1;
  std::string loss = "cross_entropy";
  std::vector<caf::actor> retrievers, processors;
  std::chrono::milliseconds timeout = default_timeout;
  std::vector<std::string> stage_places;  // per stage: "node host:port", or empty in this process (for errors)
  bool whole_batch_backward = false;  // Note [sync-backward]: one gradient for the batch once every loss is in
  // Note [events from nodes]: where the events a node's stage sends go, and per stage the node's steady clock
  // minus ours (us; 0 for a stage in this process) and the bound on that estimate (half the best round trip).
  std::shared_ptr<event_log> log;
  std::vector<double> clock_offset_us, clock_bound_us;
  float clip_grad_norm = 0.0f;  // Note [global gradient clipping]: > 0 asks every stage its norm before applying
};
// Answers (train_atom, step, inputs, labels) with a step_result once every stage has applied its
// optimizer, or with the first failure after every stage has dropped the step.
caf::actor spawn_coordinator(caf::actor_system& system, coordinator_config config);

}  // namespace ap

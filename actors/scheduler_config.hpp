// The scheduler of the actor system a pipeline or a node runs its actors in.

// Note [quiet scheduler]: CAF 0.17's work-stealing workers, with nothing to do, poll their queues 100 times,
// then 500 times more with a 50 us sleep between polls (~25 ms of waking up every 50 us), and only then wait on
// a condition variable. Every message a stage sends starts that again, so on a machine whose cores all compute
// (a stage on every core, or one stage with a team of OpenMP threads on each), the idle workers' wake-ups
// preempted the compute threads ~3,000 times a second: `train --stages 1 --threads 2` ran its GEMMs at 240
// GFLOPS against 310 in one process. Our actors do little work each (the compute is the processor's, on a
// thread of its own), so the workers poll briefly and then wait: a job sent from outside the scheduler (the
// processor's thread, the network) wakes a waiting worker at once; a job one worker sends to its own queue
// while it is busy is stolen by an idle one within relaxed-sleep-duration.
// That wait was 10 ms: each idle worker woke 100 times a second to look for work to steal, every process's two
// (a node's, a coordinator's), preempting the compute threads as before. 50 ms: `train --stages 2` on 2 node
// processes on this 2-vCPU machine (heavy MLP, batch 256, 1F1B, 100 steps) switched contexts 48.6-50.1k times
// against 56.4-58.8k (4 runs each; one process 24.5k). Our actors rarely keep a worker busy that long (a stage's
// sender no longer waits on its link on one machine: Note [offers without waiting] in
// network/activation_links.hpp; a coordinator's loss takes milliseconds). The one that can is a sender writing a
// large tensor on a link between machines (64 MB at 1.25 GB/s: 50 ms): a job queued behind it may now wait up to
// 50 ms instead of 10 for another worker to take it.
#pragma once

#include <chrono>

#include <caf/actor_system_config.hpp>
#include <caf/thread_hook.hpp>

#include "tensor/compute.hpp"

namespace ap {

// Every thread of the actor system (its workers, a detached actor's own thread) starts running ops serially
// (Note [serial actor threads] in tensor/compute.hpp); a processor's thread then becomes its stage's compute
// rank with its own team (use_compute_cores, before every action).
class serial_ops_hook : public caf::thread_hook {
 public:
  void init(caf::actor_system&) override {}
  void thread_started() override { run_ops_serially(); }
  void thread_terminates() override {}
};

inline void configure_scheduler(caf::actor_system_config& config) {
  config.add_thread_hook<serial_ops_hook>();
  config.set("scheduler.max-threads", 2);  // the actors are light; the cores are for the compute ranks
  config.set("work-stealing.aggressive-poll-attempts", 100);
  config.set("work-stealing.moderate-poll-attempts", 0);
  config.set("work-stealing.relaxed-steal-interval", 1);
  config.set("work-stealing.relaxed-sleep-duration", caf::timespan{std::chrono::milliseconds(50)});
}

}  // namespace ap

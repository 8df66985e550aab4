// The scheduler of the actor system a pipeline or a node runs its actors in.

// Note [quiet scheduler]: CAF 0.17's idle workers poll for ~25 ms before waiting, preempting compute threads
// when every core computes. Our actors do little work (compute runs on the processors' threads), so workers
// poll briefly, then wait; a job queued behind a busy worker is stolen within relaxed-sleep-duration (50 ms).
#pragma once

#include <chrono>

#include <caf/actor_system_config.hpp>
#include <caf/thread_hook.hpp>

#include "tensor/compute.hpp"

namespace ap {

// Every thread of the actor system starts running ops serially (Note [serial actor threads]); a processor's
// thread then becomes its stage's compute rank (use_compute_cores, before every action).
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

// The schedule as it ran (train --timeline): one step's measured actions and transfers, the costs they imply,
// and the schedule simulated with those costs.
#pragma once

#include <cstdint>
#include <optional>

#include <string>
#include <vector>

#include "schedule/schedule.hpp"
#include "stage/event_log.hpp"

namespace ap {

// One step as it ran, in seconds since the step's first event.
struct measured_step {
  std::uint64_t step = 0;
  std::vector<simulation::span> spans;  // every action that ran, start..end
  struct transfer {
    int stage;         // the receiving stage
    action consumer;   // the action the task is for
    double sent, arrived;  // the producing action's end (on its stage), the arrival at this stage's retriever
  };
  std::vector<transfer> transfers;  // between stages, and through the coordinator (the loss) for the last chunk
  double makespan = 0.0;            // the step's last action's end
  double busy = 0.0;                // sum of all spans
};

// From the events of one step (all of it, any order of stages). Actions that did not finish are left out.
measured_step measure_step(const std::vector<stage_event>& events, const schedule& plan);

// Per-stage costs as ap::simulate takes them: each op's mean measured duration (a whole-batch B counts as m
// backwards), scaled by the chunks per stage; transfer is the mean measured transfer.
op_costs measured_costs(const measured_step& m, const schedule& plan);

// The measured step above the schedule simulated with measured_costs, on one time axis, each with its makespan
// and bubble.
std::string timeline_svg(const schedule& plan, const measured_step& measured, const simulation& simulated);

// Keeps the events of the step in progress only; when a new step begins, the last one's makespan is summed and
// its events kept as `last()` (Note [bounded event log]). Fed from the stages' sink.
class step_recorder {
 public:
  void add(const stage_event& e);
  // The events of the latest step (complete once train_step has returned).
  const std::vector<stage_event>& last() const { return current_; }
  // Mean makespan (first event to last finish) over every step seen, in seconds.
  double mean_makespan_s() const;

 private:
  void close_step();
  std::optional<std::uint64_t> step_;  // the latest step seen; none before the first event
  std::vector<stage_event> current_;
  double first_us_ = 0.0, last_finish_us_ = 0.0;
  double makespan_sum_us_ = 0.0;
  std::size_t steps_ = 0;
};

}  // namespace ap

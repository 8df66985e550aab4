#include "actors/recovery.hpp"

#include <algorithm>
#include <cstdio>

namespace ap {

float recovery::run_step(std::uint64_t step, const tensor& inputs, const tensor& labels,
                         const std::function<float()>& attempt) {
  if (!enabled()) return attempt();
  if (!snapshot_taken_) {  // before the first step, or after a load
    first_snapshot();
    snapshot_next_step_ = step;
  }
  for (;;) {
    float loss = 0.0f;
    try {
      loss = attempt();
    } catch (const pipeline_error& e) {
      if (!restart_recovers(e)) throw;
      recover(e.what());  // throws when no restart is left
      continue;
    }
    recorded_.push_back(recovered_step{step, inputs, labels});
    if (static_cast<int>(recorded_.size()) >= std::max(1, settings_.snapshot_every)) {
      try {
        take_snapshot();
      } catch (const pipeline_error& e) {  // a node lost between the step and the snapshot
        recover(e.what());               
        take_snapshot();
      }
      snapshot_next_step_ = step + 1;
    }
    return loss;
  }
}

void recovery::run_between_steps(const std::function<void()>& action) {
  for (;;) {
    try {
      action();
      return;
    } catch (const pipeline_error& e) {
      if (!enabled() || !snapshot_taken_ || !restart_recovers(e)) throw;
      recover(e.what());
    }
  }
}

void recovery::loaded() {
  snapshot_taken_ = false;
  stages_as_placed_ = false;
  recorded_.clear();
}

void recovery::take_snapshot() {
  actions_.take_snapshot();
  snapshot_taken_ = true;
  recorded_.clear();
}

// The snapshot before the first step (or after a load). A node lost before it is recovered by placing the stages
// again from their setups, unless a load happened: then the error goes on.
void recovery::first_snapshot() {
  for (;;) {
    try {
      take_snapshot();
      stages_as_placed_ = false;
      actions_.release_setup_weights();
      return;
    } catch (const pipeline_error& e) {
      if (!stages_as_placed_ || restarts_done_ >= settings_.restarts) throw;
      ++restarts_done_;
      log("recovery " + std::to_string(restarts_done_) + " of " + std::to_string(settings_.restarts) + ": " +
          e.what() + "; before any step: placing " + settings_.placed + " again");
      actions_.restart(e.what(), settings_.wait);
    }
  }
}

void recovery::recover(std::string why) {
  for (;;) {
    if (restarts_done_ >= settings_.restarts)
      throw pipeline_error(why + " (no restart left: " + std::to_string(settings_.restarts) + " used)",
                           error_code::lost_node);
    ++restarts_done_;
    log("recovery " + std::to_string(restarts_done_) + " of " + std::to_string(settings_.restarts) + ": " + why +
        "; waiting up to " + std::to_string(settings_.wait.count()) + " ms for " + settings_.waited);
    const auto t0 = std::chrono::steady_clock::now();
    actions_.restart(why, settings_.wait);
    try {
      actions_.restore(recorded_.empty() ? snapshot_next_step_ : recorded_.front().step, why);
      for (const recovered_step& r : recorded_) actions_.replay(r);
    } catch (const pipeline_error& e) {
      if (!restart_recovers(e)) throw;
      why = e.what();
      continue;
    }
    char seconds[32];
    std::snprintf(seconds, sizeof seconds, "%.1f s",
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    log("recovery " + std::to_string(restarts_done_) + ": the nodes answered after " + seconds + "; " +
        settings_.restored + " restored from the snapshot and " + std::to_string(recorded_.size()) +
        " step(s) replayed");
    return;
  }
}

}  // namespace ap

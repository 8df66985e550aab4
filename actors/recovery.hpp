// Recovery from a lost node, shared by a single pipeline and data_parallel_pipeline's replicas (Note [recovery]).
// Which failed steps it restarts is decided by the error code alone (Note [errors as codes]).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "actors/messages.hpp"
#include "actors/pipeline.hpp"
#include "tensor/tensor.hpp"

namespace ap {

// A step that lost a node or a data-parallel peer is recovered from; any other failure is the caller's.
inline bool restart_recovers(error_code code) { return code == error_code::lost_node || code == error_code::lost_peer; }
inline bool restart_recovers(const step_result& result) { return !result.ok && restart_recovers(result.code); }
inline bool restart_recovers(const pipeline_error& e) { return restart_recovers(e.code()); }

// Note [recovery]: with restart_on_failure the owner keeps in memory a snapshot of every stage's state, taken
// before the first step and every snapshot_every steps, plus each batch since. A step that lost a node
// (restart_recovers) stops every stage, places them again on the same addresses within restart_wait, loads the
// snapshot, replays the recorded steps and reruns the failed one. Steps are deterministic (one compute thread
// per stage, fixed order, dropout seeded by step id), so a recovered run ends bit for bit as an uninterrupted
// one. A coordinator that dies loses the snapshot: --checkpoint covers that.
// This class is the policy; the owner supplies the actions (recovery_actions), Note [recovery with replicas].
struct recovery_settings {
  int restarts = 0;  // restart_on_failure; 0: none
  std::chrono::milliseconds wait{60000};  // restart_wait
  int snapshot_every = 10;
  std::function<void(const std::string&)> log;  // may be empty
  // How the log names what is restored ("the stages", "every replica's stages") and what it waits for.
  std::string placed = "the stages", restored = "every stage", waited = "the nodes";
};

struct recovered_step {
  std::uint64_t step;
  tensor inputs, labels;
};

// What a recovery does to the stages. Each throws pipeline_error; a lost node's code lets recovery try again.
struct recovery_actions {
  std::function<void()> take_snapshot;
  std::function<void()> release_setup_weights;  // Note [weights on demand]
  std::function<void(const std::string& why, std::chrono::milliseconds wait)> restart;  // stop, place again
  // Every stage loads the snapshot; the next step, the first to replay, is `next_step`.
  std::function<void(std::uint64_t next_step, const std::string& why)> restore;
  std::function<void(const recovered_step&)> replay;
};

class recovery {
 public:
  recovery(recovery_settings settings, recovery_actions actions)
      : settings_(std::move(settings)), actions_(std::move(actions)) {}

  bool enabled() const { return settings_.restarts > 0; }
  // Runs `attempt` (throws pipeline_error) until it succeeds, snapshotting as due; a lost node is recovered from
  // and the step rerun, any other failure (or one past the restarts) thrown.
  float run_step(std::uint64_t step, const tensor& inputs, const tensor& labels, const std::function<float()>& attempt);
  // The same for `action` between steps (a checkpoint's gather).
  void run_between_steps(const std::function<void()>& action);
  // A checkpoint was loaded: the next step snapshots it (a node lost before then cannot be recovered from).
  void loaded();
  int restarts_done() const { return restarts_done_; }

 private:
  void first_snapshot();
  void take_snapshot();
  void recover(std::string why);
  void log(const std::string& line) const {
    if (settings_.log) settings_.log(line);
  }

  recovery_settings settings_;
  recovery_actions actions_;
  bool snapshot_taken_ = false;
  bool stages_as_placed_ = true;  // no step, no load yet
  std::vector<recovered_step> recorded_;  // since the snapshot
  std::uint64_t snapshot_next_step_ = 0;
  int restarts_done_ = 0;
};

}  // namespace ap

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

// A step that lost a node (killed, or silent past the heartbeat timeout) or a data-parallel peer (lost_peer) is
// recovered from; any other failure is the caller's.
inline bool restart_recovers(error_code code) { return code == error_code::lost_node || code == error_code::lost_peer; }
inline bool restart_recovers(const step_result& result) { return !result.ok && restart_recovers(result.code); }
inline bool restart_recovers(const pipeline_error& e) { return restart_recovers(e.code()); }

// Note [recovery]: with restart_on_failure the owner keeps in memory a snapshot of every stage's state
// (Note [stage state]), taken before the first step and every snapshot_every steps, plus each batch trained
// since. When a step fails with a lost node (restart_recovers), every stage is stopped and placed again on the
// same addresses until restart_wait passes; the stages load the snapshot, the recorded steps replay and the
// failed step runs again. A step is a deterministic function of stage states, batch and step id (one compute
// thread per stage, fixed schedule order, dropout seeded by step id), so a recovered run ends bit for bit where
// an uninterrupted one ends. In memory, not on disk: no file per step; a coordinator that dies loses the
// snapshot (--checkpoint covers that).
//
// This class is the policy; its owner supplies the actions (recovery_actions): a pipeline's own stages, or every
// replica's at once (Note [recovery with replicas]).
struct recovery_settings {
  int restarts = 0;  // restart_on_failure: 0, no recovery (every failure goes to the caller)
  std::chrono::milliseconds wait{60000};  // restart_wait: how long a restart waits for the nodes
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
  std::function<void()> take_snapshot;  // every stage's state, kept by the owner as the snapshot
  std::function<void()> release_setup_weights;  // a snapshot restores them from now on (Note [weights on demand])
  std::function<void(const std::string& why, std::chrono::milliseconds wait)> restart;  // stop, place again
  // Every stage loads the snapshot; the next step, the first to replay, is `next_step`.
  std::function<void(std::uint64_t next_step, const std::string& why)> restore;
  std::function<void(const recovered_step&)> replay;  // one recorded step again, with its step number
};

class recovery {
 public:
  recovery(recovery_settings settings, recovery_actions actions)
      : settings_(std::move(settings)), actions_(std::move(actions)) {}

  bool enabled() const { return settings_.restarts > 0; }
  // Runs `attempt` (step `step`; throws pipeline_error) until it succeeds, snapshotting first if none is taken and
  // every snapshot_every steps. A lost node is recovered from and the step rerun; any other failure, or one past
  // the restarts, is thrown.
  float run_step(std::uint64_t step, const tensor& inputs, const tensor& labels, const std::function<float()>& attempt);
  // Runs `action` between steps (a checkpoint's gather) until it succeeds, recovering from a lost node as in a
  // step; other failures, or one past the restarts, are thrown.
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
  bool stages_as_placed_ = true;  // the stages hold what their setups gave them (no step, no load yet)
  std::vector<recovered_step> recorded_;  // the steps since the snapshot, replayed after a restore
  std::uint64_t snapshot_next_step_ = 0;  // the step after the snapshot
  int restarts_done_ = 0;
};

}  // namespace ap

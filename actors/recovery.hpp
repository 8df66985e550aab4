// Recovery from a lost node, written once for a single pipeline and for data_parallel_pipeline's replicas
// (Note [recovery]); which failed steps it restarts is decided by the step's error code alone (Note [errors as
// codes]): the text may say anything.
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

// A step that lost a node (killed, or silent past the heartbeat timeout): the pipeline waits for the node or a
// replacement, restores the last snapshot and replays. Any other failure is the caller's to see.
// A lost peer seen through a data-parallel group (lost_peer) is recovered from too: every stage is placed again.
inline bool restart_recovers(error_code code) { return code == error_code::lost_node || code == error_code::lost_peer; }
inline bool restart_recovers(const step_result& result) { return !result.ok && restart_recovers(result.code); }
inline bool restart_recovers(const pipeline_error& e) { return restart_recovers(e.code()); }

// Note [recovery]: what "the last checkpoint" is, and why a recovered run ends bit for bit where an
// uninterrupted one ends. With restart_on_failure, the owner keeps in memory a snapshot of every stage's state
// (its parameters, its optimizer's state and step count: the stage_state a checkpoint file is made of, Note
// [stage state]) taken before the first step and after every snapshot_every-th step, plus a copy of each batch
// trained since (inputs, labels, step id). When a step fails because a node was lost (killed, or silent past
// the heartbeat timeout: restart_recovers, by its error code), the coordinator and every stage are stopped
// (surviving nodes stop theirs when the owner goes), and the stages are placed again on the same addresses,
// retried until restart_wait passes (a restarted node, or a replacement listening there). Every new stage loads
// its part of the snapshot, the recorded steps are replayed with the same batches and step ids, and the failed
// step is run again. A step is a deterministic function of the stage states, the batch and the step id (one
// compute thread per stage, a fixed schedule order, dropout masks seeded by step id), so the replay reproduces
// the lost steps exactly, and the run ends with the same parameters as an uninterrupted one (tested with a node
// killed twice). In memory rather than on disk: no file, no cost of writing one per step; the cost is a gather
// of every stage's state per snapshot (a few ms for a small MLP; raise snapshot_every for big models) and
// snapshot_every batches kept. A coordinator that dies loses the snapshot: --checkpoint covers that.
//
// The policy is this class; what it does to the stages comes from its owner as recovery_actions: a pipeline's
// own stages (actors/pipeline.cpp), or every replica's at once (Note [recovery with replicas] in
// actors/data_parallel_pipeline.cpp).
struct recovery_settings {
  int restarts = 0;  // restart_on_failure: 0, no recovery (every failure goes to the caller)
  std::chrono::milliseconds wait{60000};  // restart_wait: how long a restart waits for the nodes
  int snapshot_every = 10;
  std::function<void(const std::string&)> log;  // may be empty
  // How the log names what is placed again and restored: "the stages" / "every stage", or "every replica" /
  // "every replica's stages"; and what it waits for ("the nodes", "the nodes of 2 replicas").
  std::string placed = "the stages", restored = "every stage", waited = "the nodes";
};

struct recovered_step {
  std::uint64_t step;
  tensor inputs, labels;
};

// What a recovery does to the stages. Each throws pipeline_error; a lost node's code (restart_recovers) lets the
// recovery try again where that makes sense.
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
  // Runs `attempt` (the step `step` on these inputs; it throws pipeline_error) until it succeeds: a snapshot
  // first if none is taken, then after the step its record and, every snapshot_every steps, a new snapshot. A lost
  // node is recovered from and the step run again; any other failure, or one past the restarts, is thrown.
  float run_step(std::uint64_t step, const tensor& inputs, const tensor& labels, const std::function<float()>& attempt);
  // Runs `action` on the stages between steps (a checkpoint's gather of their states) until it succeeds: a node
  // lost meanwhile is recovered from as in a step (the snapshot restored and the steps since replayed, so the
  // stages stand where they stood) and the action run again; any other failure, or one past the restarts, is thrown.
  void run_between_steps(const std::function<void()>& action);
  // A checkpoint was loaded: the next step snapshots the loaded state (a lost node before it cannot be recovered
  // from: the setups do not hold it).
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

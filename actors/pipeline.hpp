// The pipeline facade: a Sequential split into stages of CAF actors, trained one batch at a time by train_step
// with exactly the gradients of single-process training.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "collective/network_group.hpp"
#include "collective/process_group.hpp"
#include "failure/error.hpp"
#include "actors/stage_options.hpp"
#include "stage/event_log.hpp"
#include "plan/cores.hpp"
#include "plan/stage_info.hpp"
#include "network/transport_security.hpp"
#include "model/sequential.hpp"
#include "schedule/schedule.hpp"
#include "training/trainer.hpp"

namespace ap {

struct stage_state;  // stage/stage_state.hpp

// The stages' part is stage_options (Note [stage options]); the rest is the pipeline's own.
struct pipeline_options : stage_options {
  int stages = 2;
  int microbatches = 4;
  int chunks_per_stage = 1;       
  std::string schedule = "gpipe"; 
  std::optional<ap::schedule> custom_schedule;  // train --schedule-file; replaces `schedule`
  std::string loss = "cross_entropy";
  std::vector<std::size_t> layers_per_chunk;  // one count per chunk; empty: uniform (plan/partition.hpp)
  std::chrono::milliseconds step_timeout{600000};  
  // Busy time is always summed; events are kept only with record_events (Note [bounded event log]).
  bool record_events = false;
  event_log::sink on_event;  // may be empty; called from the stages' threads
  // "host:port" of `actorpipe node` processes: stage s runs on node s % size. Empty: all stages in this process
  // (Note [events from nodes]).
  std::vector<std::string> nodes;
  // If given, this process's cores per stage s, rank r at s * T + r (Note [cores per rank]).
  std::vector<compute_cores> cores;
  // Each stage's slot among its machine's ranks; empty: this pipeline's stages alone (Note [cores on nodes]).
  std::vector<node_slot> node_slots;
  float clip_grad_norm = 0.0f;  // over every stage; 0: no clipping (Note [global gradient clipping])
  // Per stage and tensor-parallel rank, this replica's data-parallel group member (Note [data-parallel stage]).
  std::vector<std::vector<std::shared_ptr<process_group>>> data_parallel_members;
  // With nodes, per stage, this replica's place among those sharing its node (Note [hierarchical collectives]).
  std::vector<colocated_rank> data_parallel_places;
  transport_security security;  // Note [mutual TLS]
  // With nodes, how many times a step that lost a node waits for it and replays from the last snapshot
  // (Note [recovery]). 0: fail at once.
  int restart_on_failure = 0;
  // Set for data_parallel_pipeline's replicas (Note [recovery with replicas]).
  bool recovered_by_owner = false;
  std::chrono::milliseconds restart_wait{60000};
  int snapshot_every = 10;  // Note [recovery]
  std::function<void(const std::string&)> log;  // may be empty
};

// A failed train step: the text names stage, action and microbatch; code() the kind (Note [errors as codes]).
class pipeline_error : public std::runtime_error, public error {
 public:
  explicit pipeline_error(const std::string& what, error_code code = error_code::internal)
      : std::runtime_error(what), error(code) {}
};

class pipeline final : public step_runner {
 public:
  // Throws std::invalid_argument for an impossible configuration, naming what is wrong.
  pipeline(const sequential& model, const pipeline_options& options);
  ~pipeline() override;
  pipeline(const pipeline&) = delete;
  pipeline& operator=(const pipeline&) = delete;

  // One optimizer step; returns the batch's mean loss. On failure throws pipeline_error and no stage has changed
  // its parameters. Step numbers must increase (dropout masks depend on them).
  float train_step(const tensor& inputs, const tensor& labels, std::uint64_t step) override;
  // A data-parallel replica's share of a batch: its first sample's index and the whole batch's rows.
  float train_shard(const tensor& inputs, const tensor& labels, std::uint64_t step, std::int64_t first_sample,
                    std::int64_t batch_rows);
  tensor predict(const tensor& inputs) override;

  sequential gather_model();

  const ap::schedule& schedule() const;  // the gradient reductions included
  // Stage s rank r at s * T + r (Note [cores per rank]); empty with nodes.
  const std::vector<compute_cores>& cores() const;
  const std::vector<layer_range>& chunk_ranges() const;
  std::vector<int> last_peak_stash() const;  // per stage, last step
  std::vector<std::uint64_t> last_peak_stash_bytes() const;  // per stage
  std::vector<float> last_microbatch_losses() const override;  // last step
  std::vector<stage_event> events() const;   // empty unless options.record_events
  std::size_t held_events() const;  // 0 unless options.record_events
  // Busy seconds per stage since construction or clear_events.
  std::vector<double> busy_seconds() const;
  void clear_events();  // also the busy sums
  int restarts() const;  // Note [recovery]

  // The three parts of a recovery (Note [recovery with replicas]); each throws pipeline_error for a lost stage.
  std::vector<stage_state> stage_states();
  void restart_stages(const std::string& why, std::chrono::milliseconds wait);
  void load_stage_states(const std::vector<stage_state>& states, std::uint64_t next_step, const std::string& why);
  // Frees the kept setups' weights (Note [weights on demand]), once the owner holds a snapshot.
  void release_setup_weights();

  // Every stage's group endpoints, stage s rank r at s * T + r (Note [data-parallel nodes]).
  std::vector<std::string> data_parallel_endpoints();
  // `addresses[(s * T + r) * replicas + d]`: replica d's endpoint of stage s rank r. Blocks until every replica has
  // connected or the timeout; throws pipeline_error naming stage and peer.
  void connect_data_parallel(const std::vector<std::string>& addresses);

  // Writes one checkpoint of the whole model atomically, between steps (Note [checkpoint layout]).
  void save_checkpoint(const std::string& path, const training_state& state) override;
  // Loads a checkpoint of any layout, checked whole first; a mismatch throws std::runtime_error naming file and
  // tensor, and no stage changes. Returns the saved position.
  training_state load_checkpoint(const std::string& path) override;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace ap

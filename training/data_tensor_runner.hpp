// Data and tensor parallelism in one process without a pipeline: D replicas of the model, each one stage of
// T tensor-parallel ranks (stage/stage_compute.hpp), one thread per (replica, rank), on shared-memory
// collectives (collective/local_group.hpp).
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "collective/local_group.hpp"
#include "failure/timeout.hpp"
#include "tensor/compute.hpp"
#include "training/trainer.hpp"

namespace ap {

class stage_compute;     // stage/stage_compute.hpp: the stage code, kept out of the installed headers
class lockstep_threads;  // stage/lockstep_threads.hpp

struct data_tensor_options {
  int data_parallel = 1;    // D: replicas, each on its share of every batch
  int tensor_parallel = 1;  // T: ranks each replica is split over (Note [tensor-parallel specs])
  float clip_grad_norm = 0.0f;  // Note [global gradient clipping]; 0: no clipping
  bool sequence_parallel = false;  // Note [sequence parallelism] in model/sequence_parallel.hpp
  int threads = 0;  // intra-op threads of each of the D x T ranks (Note [cores per rank]); 0: the cores divided evenly
  std::chrono::milliseconds timeout = default_timeout;  // every collective's wait
};

// Note [data parallelism]: replica d trains on samples shard_rows(batch, D, d) of each batch; its loss and
// gradients are scaled by the rows of the *whole* batch (Note [loss scaling]), so the replicas' gradients
// sum to the full batch's. Each replica is the whole model as one pipeline stage with one microbatch, run by
// the stage code every pipeline runs (stage_compute: the same forward, backward, tensor-parallel ranks,
// reductions, clipping and optimizer step; one implementation of a layer-by-layer pass, Note [compute dtype]
// included). Each layer's gradients are all-reduced (summed) across the replicas as soon as that layer's
// backward is done, while the layers below still run their backward (stage_compute::backward_and_reduce),
// and waited for before the optimizer step. Every replica then holds the same bits (local_group sums in rank
// order); each updates its part of the weights and copies the others' (Note [shared optimizer step] in
// stage/stage_compute.hpp), so the replicas never drift. The whole model given to the
// constructor stays the runner's view of the weights: predict and checkpoints gather the stage's state into it,
// and a loaded checkpoint is imported into every replica's stage. A step that fails (a bad label, a loss that
// is not finite) aborts the data-parallel groups so that every replica stops at once, with nothing applied; the
// runner is then spent: train_step throws for good (training stops at a failed step anyway; resume from a
// checkpoint with a new runner).
class data_tensor_runner final : public step_runner {
 public:
  // Checks everything before any step: D and T positive, the model has layers to split when T > 1 (Linear
  // pairs, attention), T divides every width and head count it splits (naming the layer). Throws
  // std::invalid_argument.
  data_tensor_runner(sequential& model, const optimizer_config& optimizer, const std::string& loss, data_tensor_options options);
  ~data_tensor_runner() override;

  float train_step(const tensor& inputs, const tensor& labels, std::uint64_t step) override;
  tensor predict(const tensor& inputs) override;
  void save_checkpoint(const std::string& path, const training_state& state) override;
  training_state load_checkpoint(const std::string& path) override;

  // "2 data-parallel replicas x 2 tensor-parallel ranks = 4 threads; split: 0 column_linear:784:512, ...";
  // a GPT's blocks: "2-5 block (head_parallel_attention:256:8, column_linear:256:1024, row_linear:1024:256)".
  std::string describe() const;
  // Where the ranks compute: "replica 0: cores 0-7, replica 1: cores 8-15" (plan/cores.hpp).
  std::string cores_layout() const;

 private:
  // The replicas' weights (all alike) into model_; returns the optimizer holding their optimizer state.
  std::unique_ptr<optimizer> gather_into_whole();
  // Every replica takes the parts the others updated (and their state) (Note [shared optimizer step]).
  void take_parts(bool state);

  sequential& model_;
  optimizer_config optimizer_config_;
  std::unique_ptr<loss> loss_;
  data_tensor_options options_;
  std::vector<std::unique_ptr<local_group>> dp_groups_;  // one per tensor-parallel rank, D members
  std::vector<std::unique_ptr<stage_compute>> replicas_;  // replica d: the whole model as one stage
  std::unique_ptr<lockstep_threads> threads_;             // runs the replicas at once, each on a thread of its own
  std::string spent_;                                     // why, after a failed step
  std::vector<compute_cores> cores_;                      // replica d, rank t at d * T + t
  std::size_t process_cores_ = 0;
};

}  // namespace ap

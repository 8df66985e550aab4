// Data and tensor parallelism in one process without a pipeline: D replicas of the model, each one stage of T
// tensor-parallel ranks, one thread per (replica, rank), on shared-memory collectives.
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

class stage_compute;  // the stage code, kept out of the installed headers
class lockstep_threads;  // stage/lockstep_threads.hpp

struct data_tensor_options {
  int data_parallel = 1;  // D: replicas
  int tensor_parallel = 1;  // T: ranks per replica (Note [tensor-parallel specs])
  float clip_grad_norm = 0.0f;  // Note [global gradient clipping]; 0: no clipping
  bool sequence_parallel = false;  // Note [sequence parallelism]
  int threads = 0;  // per rank (Note [cores per rank]); 0: the cores divided evenly
  std::chrono::milliseconds timeout = default_timeout;  // every collective's wait
};

// Note [data parallelism]: replica d trains on rows shard_rows(batch, D, d) of each batch, its loss scaled by
// the whole batch's rows (Note [loss scaling]), so the replicas' gradients sum to the full batch's. Each
// replica is the whole model as one pipeline stage run by stage_compute, the code every pipeline runs. A
// layer's gradients are all-reduced as soon as its backward is done, overlapping the layers below, and waited
// for before the optimizer step; local_group sums in rank order, so every replica holds the same bits and the
// replicas never drift (Note [shared optimizer step]). The model given to the constructor stays the runner's
// view of the weights for predict and checkpoints. A failed step aborts the groups so every replica stops with
// nothing applied; the runner is then spent and train_step throws (resume from a checkpoint with a new runner).
class data_tensor_runner final : public step_runner {
 public:
  // Checks everything before any step: D and T positive, layers to split when T > 1, T divides every width and
  // head count it splits (naming the layer). Throws std::invalid_argument.
  data_tensor_runner(sequential& model, const optimizer_config& optimizer, const std::string& loss, data_tensor_options options);
  ~data_tensor_runner() override;

  float train_step(const tensor& inputs, const tensor& labels, std::uint64_t step) override;
  tensor predict(const tensor& inputs) override;
  void save_checkpoint(const std::string& path, const training_state& state) override;
  training_state load_checkpoint(const std::string& path) override;

  // "2 data-parallel replicas x 2 tensor-parallel ranks = 4 threads; split: 0 column_linear:784:512, ...".
  std::string describe() const;
  // Where the ranks compute: "replica 0: cores 0-7, replica 1: cores 8-15".
  std::string cores_layout() const;

 private:
  // The replicas' weights into model_; returns the optimizer holding their state.
  std::unique_ptr<optimizer> gather_into_whole();
  // Every replica takes the parts the others updated (Note [shared optimizer step]).
  void take_parts(bool state);

  sequential& model_;
  optimizer_config optimizer_config_;
  std::unique_ptr<loss> loss_;
  data_tensor_options options_;
  std::vector<std::unique_ptr<local_group>> dp_groups_;
  std::vector<std::unique_ptr<stage_compute>> replicas_;  // replica d: the whole model as one stage
  std::unique_ptr<lockstep_threads> threads_;
  std::string spent_;                                     // why, after a failed step
  std::vector<compute_cores> cores_;  // replica d, rank t at d * T + t
  std::size_t process_cores_ = 0;
};

}  // namespace ap

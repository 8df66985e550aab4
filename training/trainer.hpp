// The training loop of single-process and pipeline training: epochs of seeded batches, then a test.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.hpp"
#include "data/data_source.hpp"
#include "data/dataset.hpp"
#include "model/loss.hpp"
#include "model/optimizer.hpp"
#include "model/weight_tie.hpp"
#include "model/sequential.hpp"

namespace ap {

// What trains one batch; the single-process runner below is the reference.
class step_runner {
 public:
  virtual ~step_runner() = default;
  // One optimizer step on one batch; returns the batch's mean loss. `step` counts from 0.
  virtual float train_step(const tensor& inputs, const tensor& labels, std::uint64_t step) = 0;
  // Inference outputs (rows, classes).
  virtual tensor predict(const tensor& inputs) = 0;
  // Checkpoints (Note [checkpoint layout]): model, optimizer state and `state` in one file, written atomically;
  // load returns the saved training_state or throws std::runtime_error naming the file and tensor, changing
  // nothing. The default throws std::logic_error.
  virtual void save_checkpoint(const std::string& path, const training_state& state);
  virtual training_state load_checkpoint(const std::string& path);
  // The last step's loss per microbatch, for a runner that splits batches; else empty (Note [divergence]).
  virtual std::vector<float> last_microbatch_losses() const { return {}; }
};

// A whole Sequential trained in this thread.
class local_runner final : public step_runner {
 public:
  // Note [global gradient clipping] when clip_grad_norm > 0.
  local_runner(sequential& model, const optimizer_config& optimizer, const std::string& loss = "cross_entropy",
               float clip_grad_norm = 0.0f);
  float train_step(const tensor& inputs, const tensor& labels, std::uint64_t step) override;
  tensor predict(const tensor& inputs) override;
  void save_checkpoint(const std::string& path, const training_state& state) override;
  training_state load_checkpoint(const std::string& path) override;

 private:
  sequential& model_;
  std::unique_ptr<optimizer> optimizer_;
  std::unique_ptr<loss> loss_;
  float clip_grad_norm_;
  std::vector<weight_tie> ties_;  // Note [tied weights]
};

// A run's position after a step.
struct step_progress {
  std::uint64_t step = 0;  // the step just taken, from 0 over the whole run
  std::uint64_t epoch = 0;
  std::size_t batch = 0, batches = 0;  // its batch in the epoch (from 0) and the epoch's batches
  double loss = 0.0;             // its batch's mean loss
  std::size_t steps_done = 0;  // steps taken by this call, this one included
  std::size_t steps_total = 0;  // steps this call will take if nothing stops it
  std::size_t samples = 0;
  double elapsed_s = 0.0;
};

struct train_config {
  std::size_t epochs = 1;
  std::size_t batch_size = 128;
  std::uint64_t seed = 1;       // data order
  std::size_t max_steps = 0;    // total steps, start_step included (0: whole epochs)
  std::function<void(const std::string&)> log;
  std::function<void(const step_progress&)> on_step;
  // Where to start (a resumed run sets these and `seed` from its training_state: Note [resumed trajectory]).
  std::uint64_t start_step = 0, start_epoch = 0, start_batch = 0;
  // If set, called with the position every `checkpoint_every` steps (0: never) and at the end if steps were
  // taken since. Its model_spec is left empty.
  std::function<void(const training_state&)> checkpoint;
  std::size_t checkpoint_every = 0;
  // Stop with an error once a loss exceeds this factor times max(first loss, 1) (0: never); a non-finite loss
  // always stops (Note [divergence]).
  double divergence_factor = 1000.0;
  // If set, called with the step count every `evaluate_every` steps.
  std::function<void(std::uint64_t step)> evaluate;
  std::size_t evaluate_every = 0;
  // Empty: batches as the data has them. Else each (rows, context) batch is cut to its first L positions, L
  // chosen per step from (seed, step) (Note [sequence lengths]).
  std::vector<std::size_t> sequence_lengths;
};

// Note [sequence lengths]: stages take a batch's shape from the message and every layer reads T from its
// input, so a language model may train on a different sequence length at every step. Step `step` uses
// lengths[hash(seed, step) % n]: the same for a resumed run.
std::size_t sequence_length_of(const std::vector<std::size_t>& lengths, std::uint64_t seed, std::uint64_t step);
// The first `length` positions of every window: (rows, context) inputs and labels cut to (rows, length).
// Throws std::invalid_argument naming both when length is 0 or too large.
batch first_positions(const batch& b, std::size_t length);

// Note [divergence]: train() stops at the first step whose loss is not finite or exceeds
// divergence_factor * max(L0, 1), L0 being this call's first loss, so a diverging run stops within a few
// steps instead of running to its end. The floor of 1 keeps a run resumed from a well-trained checkpoint from
// stopping on one noisy batch; the default factor 1000 is far above any loss a learning run reaches.
// Returns "" when `loss` is fine, else why not; `microbatch_losses` (may be empty) adds the microbatch of the
// largest loss.
std::string loss_problem(double loss, double first_loss, double divergence_factor,
                         const std::vector<float>& microbatch_losses = {});

struct train_report {
  std::size_t steps = 0, samples = 0;
  std::size_t positions = 0;  // samples x sequence length for a language model
  double wall_s = 0.0;  // without the final test
  double samples_per_s = 0.0;
  double positions_per_s = 0.0;
  double median_step_s = 0.0;    // the median of the steps' wall times
  // Mean batch loss over the steps this call took in its last epoch (after a mid-epoch resume, only those).
  double final_loss = 0.0;
  std::size_t final_loss_steps = 0;
  double last_loss = 0.0;
  double test_accuracy = 0.0;
  std::vector<double> epoch_losses;
};

// Note [resumed trajectory]: step s trains batch b of epoch e, ordered by sample_order (Note [lazy epoch
// order]), with step number s (dropout masks depend on it). A run started at (start_step, start_epoch,
// start_batch) with the weights and optimizer state saved there takes exactly the steps the uninterrupted run
// takes. The test accuracy is predicted in batches (Note [evaluation in batches]); with no test set it stays 0.
train_report train(step_runner& runner, const data_source& train_set, const data_source* test_set,
                   const train_config& config);
// The same on in-memory data sets (no copy).
train_report train(step_runner& runner, const dataset& train_set, const dataset& test_set, const train_config& config);

// Note [evaluation in batches]: evaluate_loss and evaluate_accuracy predict `batch_size` rows at a time, so
// memory is one batch's whatever the data set's size. No layer mixes samples, so the accuracy equals the
// one-batch accuracy; the loss sums each batch's mean weighted by its label count, in double, within about
// 1e-7 relative of the one-batch loss.

// Mean cross-entropy per label (nats) over the whole data set, predicted in batches of `batch_size`.
double evaluate_loss(step_runner& runner, const data_source& d, std::size_t batch_size = 64);
double evaluate_loss(step_runner& runner, const dataset& d, std::size_t batch_size = 64);
// "epoch 2/10  step 57/234  loss 0.5432  12,345 samples/s  ETA 0:12": one progress line (no newline).
std::string progress_line(const step_progress& p, std::size_t epochs);

// Share of rows whose arg-max matches the label, predicted in batches (Note [evaluation in batches]).
double evaluate_accuracy(step_runner& runner, const data_source& d, std::size_t batch_size = 1000);
double evaluate_accuracy(step_runner& runner, const dataset& d, std::size_t batch_size = 1000);

}  // namespace ap

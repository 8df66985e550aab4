#include "training/data_tensor_runner.hpp"

#include <stdexcept>

#include "checkpoint/checkpoint.hpp"
#include "collective/shard.hpp"
#include "failure/error.hpp"
#include "model/grad_clip.hpp"
#include "plan/cores.hpp"
#include "stage/lockstep_threads.hpp"
#include "model/sequence_parallel.hpp"
#include "model/vocab_parallel.hpp"
#include "stage/stage_compute.hpp"
#include "stage/stage_state.hpp"
#include "tensor/tensor.hpp"

namespace ap {

data_tensor_runner::data_tensor_runner(sequential& model, const optimizer_config& optimizer, const std::string& loss,
                                       data_tensor_options options)
    : model_(model), optimizer_config_(optimizer), loss_(make_loss(loss)), options_(options) {
  const int D = options.data_parallel, T = options.tensor_parallel;
  if (D < 1) throw std::invalid_argument("--data-parallel must be at least 1, got " + std::to_string(D));
  if (T < 1) throw std::invalid_argument("--tensor-parallel must be at least 1, got " + std::to_string(T));
  make_optimizer(optimizer);  // refuses a bad optimizer before anything is built
  keep_tensor_memory();       // before the ranks' threads start: Note [one malloc arena]
  const std::vector<int> cores = process_cores();
  process_cores_ = cores.size();
  cores_ = assign_cores(cores, D * T, options.threads);  // Note [cores per rank]
  for (int d = 0; d < D; ++d) {
    std::vector<sequential> whole;
    whole.push_back(model.clone());  // keeps the compute dtype (Note [compute dtype])
    const auto mine = cores_.begin() + d * T;
    replicas_.push_back(std::make_unique<stage_compute>(0, std::vector<int>{0}, std::move(whole), optimizer, T,
                                                        options.timeout, std::vector<compute_cores>(mine, mine + T)));
    if (splits_vocabulary(model.layer_specs(), loss_->name(), T)) replicas_.back()->split_vocabulary(0);  // Note [vocab-parallel]
    if (options.sequence_parallel) {
      if (d == 0) check_sequence_parallel(model.layer_specs(), T);
      replicas_.back()->split_sequence();
    }
  }
  if (T > 1 && replicas_[0]->split_layers().empty())
    throw std::invalid_argument("--tensor-parallel " + std::to_string(T) +
                                ": the model has no Linear pair to split over the ranks, and no attention (Note "
                                "[tensor-parallel specs]: two Linear layers with only an activation between them)");
  if (D > 1) {
    for (int t = 0; t < T; ++t)
      dp_groups_.push_back(std::make_unique<local_group>("data-parallel rank " + std::to_string(t), D, options.timeout));
    for (int d = 0; d < D; ++d) {
      std::vector<std::shared_ptr<process_group>> members;
      for (int t = 0; t < T; ++t) members.emplace_back(dp_groups_[static_cast<std::size_t>(t)]->member(d));
      replicas_[static_cast<std::size_t>(d)]->join_data_parallel(std::move(members), d);
    }
  }
  // A thread per replica (the caller's is never pinned), each rank 0 of its stage (Note [cores per rank]).
  threads_ = std::make_unique<lockstep_threads>(D, std::vector<compute_cores>{}, /*caller_runs_rank0=*/false);
}

data_tensor_runner::~data_tensor_runner() = default;

std::string data_tensor_runner::describe() const {
  const int D = options_.data_parallel, T = options_.tensor_parallel;
  const std::string text = std::to_string(D) + " data-parallel replica" + (D == 1 ? "" : "s") + " x " +
                           std::to_string(T) + " tensor-parallel rank" + (T == 1 ? "" : "s") + " = " +
                           std::to_string(D * T) + " thread" + (D * T == 1 ? "" : "s");
  const std::string& split = replicas_[0]->split_layers();
  return text + (split.empty() ? std::string() : "; split: " + split);
}

std::string data_tensor_runner::cores_layout() const {
  return cores_layout_text(rank_names(options_.data_parallel, 0, options_.tensor_parallel), cores_, process_cores_);
}

float data_tensor_runner::train_step(const tensor& inputs, const tensor& labels, std::uint64_t step) {
  if (!spent_.empty())
    throw std::runtime_error("step " + std::to_string(step) + ": the mesh is spent after a failed step (" + spent_ +
                             "); resume from a checkpoint");
  const std::size_t D = static_cast<std::size_t>(options_.data_parallel);
  const std::size_t samples = inputs.dimension() == 0 ? 0 : inputs.shape()[0];
  if (samples < D)
    throw std::invalid_argument("step " + std::to_string(step) + ": a batch of " + std::to_string(samples) +
                                " samples cannot feed " + std::to_string(D) + " data-parallel replicas");
  const std::size_t batch_rows = loss_->batch_rows(labels);
  model_.check_input(inputs);  // names a bad width or dtype before any thread starts
  std::vector<float> loss_shares(D, 0.0f);
  const std::vector<std::exception_ptr> errors = threads_->run([&](int d) {
    stage_compute& replica = *replicas_[static_cast<std::size_t>(d)];
    try {
      // One microbatch through the one stage: F, the loss, B with the reductions.
      const auto [first, last] = shard_rows(samples, D, static_cast<std::size_t>(d));
      const tensor x = slice_rows(inputs, first, last), y = slice_rows(labels, first, last);
      loss::loss_and_gradient result;  // a split vocabulary keeps its gradient (Note [loss in the last stage])
      try {
        if (replica.splits_vocabulary()) result.loss = replica.forward_loss(step, 0, 0, static_cast<int>(first), x, y, batch_rows);
        else result = loss_->take_loss_and_gradient(replica.forward(step, 0, 0, static_cast<int>(first), x), y, batch_rows);
      } catch (const std::domain_error& e) {
        throw diverged_error("step " + std::to_string(step) + ": " + e.what());
      }
      loss_shares[static_cast<std::size_t>(d)] = result.loss;
      replica.backward_and_reduce(0, 0, result.gradient);
      float factor = 1.0f;  // Note [global gradient clipping]
      if (options_.clip_grad_norm > 0.0f) factor = clip_factor(replica.gradient_square_sum(), options_.clip_grad_norm);
      replica.apply_optimizer(factor, d, static_cast<int>(D));  // part d only (Note [shared optimizer step])
    } catch (...) {
      replica.abort();  // the other replicas must not commit this step (Note [data-parallel stage])
      throw;
    }
  });
  if (const int cause = first_cause(errors); cause >= 0) {  // Note [the cause, not a peer's view]
    const failure f = failure_of(errors[static_cast<std::size_t>(cause)]);
    spent_ = "replica " + std::to_string(cause);
    throw_step_error(f.code, f.what + (D > 1 ? " (replica " + std::to_string(cause) + ")" : ""));
  }
  if (D > 1) take_parts(false);
  float total = 0.0f;
  for (float share : loss_shares) total += share;
  return total;
}

void data_tensor_runner::take_parts(bool state) {
  std::vector<stage_compute*> all;
  for (auto& r : replicas_) all.push_back(r.get());
  const std::vector<std::exception_ptr> errors =
      threads_->run([&](int d) { replicas_[static_cast<std::size_t>(d)]->take_parts(all, d, state); });
  if (const int cause = first_cause(errors); cause >= 0) {
    spent_ = "replica " + std::to_string(cause) + " could not take the others' updated parts";
    std::rethrow_exception(errors[static_cast<std::size_t>(cause)]);
  }
}

std::unique_ptr<optimizer> data_tensor_runner::gather_into_whole() {
  if (options_.data_parallel > 1) take_parts(true);  // replica 0's state made whole (Note [shared optimizer step])
  std::unique_ptr<optimizer> opt = make_optimizer(optimizer_config_);
  if (const std::string why = gather_stage_states({replicas_[0]->export_state()}, model_, *opt, optimizer_config_.kind);
      !why.empty())
    throw std::logic_error("mesh: replica 0's state does not fit the whole model: " + why);
  return opt;
}

tensor data_tensor_runner::predict(const tensor& inputs) {
  gather_into_whole();
  return model_.forward(inputs);
}

void data_tensor_runner::save_checkpoint(const std::string& path, const training_state& state) {
  const std::unique_ptr<optimizer> opt = gather_into_whole();
  ap::save_checkpoint(path, model_, opt.get(), state);
}

training_state data_tensor_runner::load_checkpoint(const std::string& path) {
  // Everything is checked while loading into the whole model, before any replica changes.
  std::unique_ptr<optimizer> opt = make_optimizer(optimizer_config_);
  opt->init_state(model_.parameters());
  training_state loaded = ap::load_checkpoint(path, model_, opt.get());
  stage_state whole{0, opt->steps(), {}};
  add_parameters(whole.tensors, model_.parameters());
  add_optimizer_state(whole.tensors, opt->state(), checkpoint_optimizer_prefix);
  for (auto& r : replicas_) r->import_state(whole);
  return loaded;
}

}  // namespace ap

#include "training/trainer.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <stdexcept>

#include "failure/error.hpp"
#include "random/seeded_random.hpp"
#include "model/grad_clip.hpp"

namespace ap {

local_runner::local_runner(sequential& model, const optimizer_config& optimizer, const std::string& loss,
                           float clip_grad_norm)
    : model_(model), optimizer_(make_optimizer(optimizer)), loss_(make_loss(loss)), clip_grad_norm_(clip_grad_norm),
      ties_(weight_ties(model, /*whole=*/true)) {
  if (!(clip_grad_norm >= 0.0f))
    throw std::invalid_argument("--clip-grad-norm must be positive (or 0: no clipping), got " + std::to_string(clip_grad_norm));
}

float local_runner::train_step(const tensor& inputs, const tensor& labels, std::uint64_t step) {
  // forward refuses a wrong dtype or width before any layer runs.
  model_.zero_grad();
  sequential_cache cache;
  tensor output = model_.forward(inputs, cache, forward_context{true, step, 0});
  loss::loss_and_gradient result;
  try {
    result = loss_->take_loss_and_gradient(std::move(output), labels);
  } catch (const std::domain_error& e) {  // a non-finite loss: say at which step
    throw diverged_error("step " + std::to_string(step) + ": " + e.what());
  }
  const float batch_loss = result.loss;
  model_.backward(result.gradient, cache, /*need_input_grad=*/false);
  const auto params = model_.parameters();
  tie_gradients(params, ties_);
  if (clip_grad_norm_ > 0.0f) {
    const double squares = gradient_square_sum(params, [&](const parameter& p) { return !is_tied_copy(p.name, ties_); });
    scale_gradients(params, clip_factor(squares, clip_grad_norm_));
  }
  optimizer_->step(params);
  return batch_loss;
}

tensor local_runner::predict(const tensor& inputs) { return model_.forward(inputs); }

void local_runner::save_checkpoint(const std::string& path, const training_state& state) {
  ap::save_checkpoint(path, model_, optimizer_.get(), state);
}

training_state local_runner::load_checkpoint(const std::string& path) {
  return ap::load_checkpoint(path, model_, optimizer_.get());
}

void step_runner::save_checkpoint(const std::string& path, const training_state&) {
  throw std::logic_error("cannot save checkpoint " + path + ": this runner has no checkpoints");
}

training_state step_runner::load_checkpoint(const std::string& path) {
  throw std::logic_error("cannot load checkpoint " + path + ": this runner has no checkpoints");
}

std::string loss_problem(double loss, double first_loss, double divergence_factor,
                         const std::vector<float>& microbatch_losses) {
  std::string where;  // ", largest in microbatch 2 (1e+09)"
  if (!microbatch_losses.empty()) {
    // Any non-finite one first (NaN compares false), then the largest.
    std::size_t worst = 0;
    for (std::size_t i = 0; i < microbatch_losses.size(); ++i) {
      const float v = microbatch_losses[i], w = microbatch_losses[worst];
      if (std::isfinite(w) && (!std::isfinite(v) || v > w)) worst = i;
    }
    char part[96];
    std::snprintf(part, sizeof part, " (largest in microbatch %zu: %.4g)", worst, microbatch_losses[worst]);
    where = part;
  }
  char text[200];
  if (!std::isfinite(loss)) {
    std::snprintf(text, sizeof text, "the loss is not finite (%g)", loss);
    return text + where + ": the training diverged";
  }
  const double bound = divergence_factor * std::max(first_loss, 1.0);
  if (divergence_factor > 0 && loss > bound) {
    std::snprintf(text, sizeof text, "the loss %.4g exceeds %g times the first step's loss %.4g (floor 1)", loss,
                  divergence_factor, first_loss);
    return text + where + ": the training diverges (lower the learning rate; the factor is --divergence-factor)";
  }
  return "";
}

double evaluate_loss(step_runner& runner, const dataset& d, std::size_t batch_size) {
  return evaluate_loss(runner, *dataset_view(d), batch_size);
}

double evaluate_loss(step_runner& runner, const data_source& d, std::size_t batch_size) {
  if (d.size() == 0) return 0.0;
  const softmax_cross_entropy ce;
  double sum = 0.0;
  std::size_t labels = 0;
  for (std::size_t b = 0; b < batch_count(d.size(), batch_size); ++b) {
    const batch bt = gather_in_order(d, b, batch_size);
    sum += double(ce.compute_loss(runner.predict(bt.inputs), bt.labels)) * double(bt.labels.size());
    labels += bt.labels.size();
  }
  return sum / double(labels);
}

std::string progress_line(const step_progress& p, std::size_t epochs) {
  const double rate = p.elapsed_s > 0 ? static_cast<double>(p.samples) / p.elapsed_s : 0.0;
  const double per_step = p.steps_done > 0 ? p.elapsed_s / static_cast<double>(p.steps_done) : 0.0;
  const auto eta = static_cast<long long>(per_step * static_cast<double>(p.steps_total - std::min(p.steps_total, p.steps_done)) + 0.5);
  char text[200];
  std::snprintf(text, sizeof text, "epoch %llu/%zu  step %zu/%zu  loss %.4f  %.0f samples/s  ETA %lld:%02lld",
                static_cast<unsigned long long>(p.epoch + 1), epochs, p.batch + 1, p.batches, p.loss, rate, eta / 60,
                eta % 60);
  return text;
}

double evaluate_accuracy(step_runner& runner, const dataset& d, std::size_t batch_size) {
  return evaluate_accuracy(runner, *dataset_view(d), batch_size);
}

double evaluate_accuracy(step_runner& runner, const data_source& d, std::size_t batch_size) {
  if (d.size() == 0) return 0.0;
  std::size_t correct = 0, labels = 0;
  for (std::size_t b = 0; b < batch_count(d.size(), batch_size); ++b) {
    const batch bt = gather_in_order(d, b, batch_size);
    correct += count_correct(runner.predict(bt.inputs), bt.labels);
    labels += bt.labels.size();
  }
  return static_cast<double>(correct) / static_cast<double>(labels);  // per label: per token for text
}

train_report train(step_runner& runner, const dataset& train_set, const dataset& test_set,
                   const train_config& config) {
  const auto test = dataset_view(test_set);
  return train(runner, *dataset_view(train_set), test.get(), config);
}

train_report train(step_runner& runner, const data_source& train_set, const data_source* test_set,
                   const train_config& config) {
  using clock = std::chrono::steady_clock;
  train_report report;
  const auto start = clock::now();
  const std::size_t batches = batch_count(train_set.size(), config.batch_size);
  if (config.start_batch > batches)
    throw std::invalid_argument("train: start batch " + std::to_string(config.start_batch) + " of epoch " +
                                std::to_string(config.start_epoch) + " is beyond the epoch's " +
                                std::to_string(batches) + " batches of " + std::to_string(config.batch_size));
  // Where training stands after `steps` steps, batch `next` of `epoch` next (Note [resumed trajectory]).
  const auto position = [&](std::uint64_t steps, std::uint64_t epoch, std::uint64_t next) {
    training_state at;
    at.step = steps;
    const bool epoch_over = batches > 0 && next == batches;
    at.epoch = epoch_over ? epoch + 1 : epoch;
    at.batch_in_epoch = epoch_over ? 0 : next;
    at.data_seed = config.seed;
    return at;
  };
  training_state at = position(config.start_step, config.start_epoch, config.start_batch);
  // Steps this call takes if nothing stops it.
  const std::uint64_t all_steps = static_cast<std::uint64_t>(config.epochs) * batches;
  const std::uint64_t end_step = config.max_steps ? std::min<std::uint64_t>(config.max_steps, all_steps) : all_steps;
  const std::size_t steps_total = end_step > at.step ? static_cast<std::size_t>(end_step - at.step) : 0;
  std::uint64_t checkpointed = at.step;  // steps at the last checkpoint (or the start)
  bool done = false;
  double first_loss = 0.0;  // of this call's first step: Note [divergence]
  std::vector<double> step_seconds;
  for (std::uint64_t epoch = at.epoch; epoch < config.epochs && !done; ++epoch) {
    const sample_order order(train_set.size(), config.seed, epoch);  // See Note [lazy epoch order]
    double loss_sum = 0.0;
    std::size_t epoch_steps = 0;
    for (std::size_t b = epoch == at.epoch ? at.batch_in_epoch : 0; b < batches; ++b) {
      if (config.max_steps && at.step >= config.max_steps) { done = true; break; }
      batch bt = gather_batch(train_set, order, b, config.batch_size);
      if (!config.sequence_lengths.empty())  // Note [sequence lengths]
        bt = first_positions(bt, sequence_length_of(config.sequence_lengths, config.seed, at.step));
      const auto step_start = clock::now();
      const double loss = runner.train_step(bt.inputs, bt.labels, at.step);
      step_seconds.push_back(std::chrono::duration<double>(clock::now() - step_start).count());
      if (report.steps == 0) first_loss = loss;
      if (!loss_problem(loss, first_loss, config.divergence_factor).empty())
        throw std::runtime_error("step " + std::to_string(at.step) + ": " +
                                 loss_problem(loss, first_loss, config.divergence_factor, runner.last_microbatch_losses()));
      loss_sum += loss;
      at = position(at.step + 1, epoch, b + 1);
      ++report.steps, ++epoch_steps;
      report.samples += rows(bt.inputs);
      report.positions += bt.labels.size();
      if (config.evaluate && config.evaluate_every && at.step % config.evaluate_every == 0) config.evaluate(at.step);
      report.last_loss = loss;
      if (config.on_step)
        config.on_step(step_progress{at.step - 1, epoch, b, batches, loss, report.steps, steps_total, report.samples,
                                     std::chrono::duration<double>(clock::now() - start).count()});
      if (config.checkpoint && config.checkpoint_every && at.step % config.checkpoint_every == 0) {
        config.checkpoint(at);
        checkpointed = at.step;
      }
    }
    if (epoch_steps == 0) break;
    report.epoch_losses.push_back(loss_sum / static_cast<double>(epoch_steps));
    report.final_loss = report.epoch_losses.back();
    report.final_loss_steps = epoch_steps;
    if (config.log) {
      char line[160];
      std::snprintf(line, sizeof line, "epoch %llu: mean loss %.4f over %zu steps, %.1f s",
                    static_cast<unsigned long long>(epoch + 1), report.final_loss, epoch_steps,
                    std::chrono::duration<double>(clock::now() - start).count());
      config.log(line);
    }
  }
  if (config.checkpoint && at.step != checkpointed) config.checkpoint(at);
  report.wall_s = std::chrono::duration<double>(clock::now() - start).count();
  report.samples_per_s = report.wall_s > 0 ? static_cast<double>(report.samples) / report.wall_s : 0.0;
  report.positions_per_s = report.wall_s > 0 ? static_cast<double>(report.positions) / report.wall_s : 0.0;
  if (!step_seconds.empty()) {
    std::nth_element(step_seconds.begin(), step_seconds.begin() + step_seconds.size() / 2, step_seconds.end());
    report.median_step_s = step_seconds[step_seconds.size() / 2];
  }
  if (test_set)  // Note [evaluation in batches]
    report.test_accuracy = evaluate_accuracy(runner, *test_set, config.batch_size);
  return report;
}

std::size_t sequence_length_of(const std::vector<std::size_t>& lengths, std::uint64_t seed, std::uint64_t step) {
  if (lengths.empty()) throw std::invalid_argument("sequence_length_of: no lengths to choose from");
  return lengths[hash_counters(seed, step) % lengths.size()];
}

batch first_positions(const batch& b, std::size_t length) {
  if (b.inputs.dimension() != 2 || b.labels.dimension() != 2 || b.inputs.shape() != b.labels.shape())
    throw std::invalid_argument("sequence lengths need (rows, context) windows of inputs and labels, got inputs " +
                                shape_string(b.inputs) + " and labels " + shape_string(b.labels));
  const std::size_t n = b.inputs.shape()[0], context = b.inputs.shape()[1];
  if (length == 0 || length > context)
    throw std::invalid_argument("sequence length " + std::to_string(length) + " does not fit windows of " +
                                std::to_string(context) + " positions (the model spec's key 'context')");
  batch out{tensor::from_shape({n, length}), tensor::from_shape({n, length})};
  for (std::size_t r = 0; r < n; ++r) {
    std::copy_n(b.inputs.data() + r * context, length, out.inputs.data() + r * length);
    std::copy_n(b.labels.data() + r * context, length, out.labels.data() + r * length);
  }
  return out;
}

}  // namespace ap

// `actorpipe train`'s run: the training loop with its progress line, loss curve, resume, checkpoints and a
// language model's periodic validation.
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <iostream>

#include "cli/train_run.hpp"
#include "tensor/tensor_memory.hpp"

namespace ap::cli {
namespace {

// Each epoch's mean loss at its last step, from the steps as they come (the plot's epoch line).
class epoch_mean_points {
 public:
  void add(const step_progress& p) {
    if (count_ > 0 && p.epoch != epoch_) close();
    epoch_ = p.epoch, sum_ += p.loss, ++count_, last_step_ = p.step;
  }
  std::vector<loss_curve::point> finish() {
    if (count_ > 0) close();
    return points_;
  }

 private:
  void close() {
    points_.push_back({static_cast<double>(last_step_), sum_ / static_cast<double>(count_)});
    sum_ = 0.0, count_ = 0;
  }
  std::uint64_t epoch_ = 0, last_step_ = 0;
  double sum_ = 0.0;
  std::size_t count_ = 0;
  std::vector<loss_curve::point> points_;
};

// Note [resumed trajectory] in trainer.hpp: the runner takes the checkpoint's weights and optimizer state,
// `config` its position and data order seed. Returns the checkpoint's step.
std::uint64_t resume(const train_options& o, step_runner& runner, train_config& config) {
  const training_state at = runner.load_checkpoint(o.resume_file);
  config.start_step = at.step, config.start_epoch = at.epoch, config.start_batch = at.batch_in_epoch;
  if (config.seed != at.data_seed)
    std::cerr << "resume: data order seed " << at.data_seed << " from the checkpoint, not --seed " << config.seed
              << "\n";
  config.seed = at.data_seed;
  std::cerr << "resumed from " << o.resume_file << " at step " << at.step << " (epoch " << at.epoch + 1
            << ", batch " << at.batch_in_epoch << ")\n";
  return at.step;
}

}  // namespace

double validation_loss(const train_options& o, step_runner& runner, const dataset& validation, const std::string& when) {
  const double nats = evaluate_loss(runner, validation, o.train.batch_size);
  std::cerr << when << ": validation loss " << nats << " nats/byte, " << nats / std::log(2.0) << " bits/byte\n";
  return nats;
}

train_outcome run_training(const train_options& o, const train_plan& plan, step_runner& runner) {
  train_outcome outcome;
  train_config config = o.train;
  // A progress line rewritten in place while an epoch runs, on a terminal only (a log file gets the epoch lines).
  const bool progress = isatty(STDERR_FILENO) == 1 && !o.stage_log;
  config.log = [progress](const std::string& line) { std::cerr << (progress ? "\r\033[K" : "") << line << "\n"; };
  epoch_mean_points epoch_points;
  auto last_progress = std::chrono::steady_clock::time_point{};
  std::vector<double> step_ends;  // --auto's early check: the first steps' end times
  config.on_step = [&, progress, epochs = config.epochs](const step_progress& p) {
    if (p.steps_done == p.steps_total)  // the last step, before any evaluation: Note [memory model]
      outcome.training_peak = measure_resident_memory().peak, outcome.tensor_peak = tensor_bytes_peak();
    if (plan.auto_choice && step_ends.size() <= auto_early_steps) {
      step_ends.push_back(p.elapsed_s);
      if (step_ends.size() == auto_early_steps + 1) report_auto_early(*plan.auto_choice, step_ends);
    }
    if (!o.plot_file.empty()) {
      outcome.curve.steps.push_back({static_cast<double>(p.step), p.loss});
      epoch_points.add(p);
    }
    const auto now = std::chrono::steady_clock::now();
    if (progress && (now - last_progress > std::chrono::milliseconds(200) || p.steps_done == p.steps_total)) {
      last_progress = now;
      std::cerr << "\r\033[K" << progress_line(p, epochs) << std::flush;
    }
  };
  if (!o.resume_file.empty()) outcome.resumed_at_step = resume(o, runner, config);
  if (!o.checkpoint_file.empty())
    config.checkpoint = [&](const training_state& at) {
      training_state saved = at;
      saved.model_spec = o.model;
      runner.save_checkpoint(o.checkpoint_file, saved);
      std::cerr << "checkpoint of step " << saved.step << " written to " << o.checkpoint_file << "\n";
    };
  if (plan.language_model && o.eval_every) {
    config.evaluate_every = o.eval_every;
    config.evaluate = [&](std::uint64_t step) {
      validation_loss(o, runner, plan.test_set, "step " + std::to_string(step));
    };
  }
  outcome.report = train(runner, plan.train_set, plan.test_set, config);
  if (progress) std::cerr << "\r\033[K";
  outcome.curve.epochs = epoch_points.finish();
  return outcome;
}

}  // namespace ap::cli

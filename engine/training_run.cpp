// The engine's training loop.
#include <chrono>
#include <cmath>
#include <fstream>
#include <stdexcept>

#include "engine/engine_parts.hpp"
#include "model/lr_schedule.hpp"
#include "tensor/tensor_memory.hpp"

namespace ap::engine_parts {
namespace {

// Each epoch's mean loss, for the plot.
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

// The runner takes the checkpoint's weights and optimizer state, `config` its position and data order seed
// (Note [resumed trajectory]). Returns the checkpoint's step.
std::uint64_t resume(const run_config& o, const train_plan& plan, step_runner& runner, train_config& config) {
  const training_state at = runner.load_checkpoint(o.resume_file);
  config.start_step = at.step, config.start_epoch = at.epoch, config.start_batch = at.batch_in_epoch;
  if (config.seed != at.data_seed)
    say(plan) << "resume: data order seed " << at.data_seed << " from the checkpoint, not seed " << config.seed;
  config.seed = at.data_seed;
  say(plan) << "resumed from " << o.resume_file << " at step " << at.step << " (epoch " << at.epoch + 1 << ", batch "
            << at.batch_in_epoch << ")";
  return at.step;
}

// Note [metrics log]: `--log FILE` gets one JSON object per line, per step and per validation (fields in
// docs/usage.md). A fresh run starts the file, a resumed one appends, so it holds the whole trajectory. Each line
// is flushed as written: a killed run leaves whole lines.
class metrics_log {
 public:
  metrics_log(const std::string& path, bool append) {
    if (path.empty()) return;
    out_.open(path, append ? std::ios::app : std::ios::trunc);
    if (!out_) throw std::runtime_error("key 'log': cannot write the metrics log to " + path);
    path_ = path;
  }
  void write(const nlohmann::json& line) {
    if (path_.empty()) return;
    out_ << line.dump() << "\n" << std::flush;
    if (!out_) throw std::runtime_error("key 'log': writing the metrics log to " + path_ + " failed");
  }
  bool open() const { return !path_.empty(); }

 private:
  std::string path_;
  std::ofstream out_;
};

}  // namespace

double validation_loss(const run_config& o, const train_plan& plan, step_runner& runner, const std::string& when) {
  const double nats = evaluate_loss(runner, *plan.test_set, o.train.batch_size);
  say(plan) << when << ": validation loss " << nats << " nats/token, " << nats / std::log(2.0) << " bits/token";
  return nats;
}

train_outcome run_training(const run_config& o, const train_plan& plan, step_runner& runner,
                           const engine_callbacks& callbacks) {
  train_outcome outcome;
  train_config config = o.train;
  config.log = plan.log;
  epoch_mean_points epoch_points;
  std::vector<double> step_ends;  // --auto's early check
  metrics_log metrics(o.log_file, !o.resume_file.empty());
  double last_elapsed = 0.0;
  std::size_t last_samples = 0;
  std::vector<double> last_busy;
  config.on_step = [&](const step_progress& p) {
    if (p.steps_done == p.steps_total)  // Note [memory model]
      outcome.training_peak = measure_resident_memory().peak, outcome.tensor_peak = tensor_bytes_peak();
    if (plan.auto_choice && step_ends.size() <= auto_early_steps) {
      step_ends.push_back(p.elapsed_s);
      if (step_ends.size() == auto_early_steps + 1) report_auto_early(plan, *plan.auto_choice, step_ends);
    }
    if (!o.plot_file.empty()) {
      outcome.curve.steps.push_back({static_cast<double>(p.step), p.loss});
      epoch_points.add(p);
    }
    const float lr = lr_at(o.optimizer, p.step);
    outcome.last_lr = lr;
    if (metrics.open()) {
      const double step_s = p.elapsed_s - last_elapsed;
      const auto samples = static_cast<double>(p.samples - last_samples);
      nlohmann::json line = {{"step", p.step}, {"epoch", p.epoch}, {"batch", p.batch}, {"loss", p.loss},
                             {"lr", lr},       {"step_s", step_s},   {"samples_per_s", step_s > 0 ? samples / step_s : 0.0}};
      if (plan.language_model) {
        const std::size_t length = o.train.sequence_lengths.empty()
                                       ? plan.train_set->sample_shape().back()
                                       : sequence_length_of(o.train.sequence_lengths, config.seed, p.step);
        line["tokens_per_s"] = step_s > 0 ? samples * static_cast<double>(length) / step_s : 0.0;
      }
      if (plan.stage_busy) {
        std::vector<double> busy = plan.stage_busy();
        std::vector<double> in_step(busy.size());
        for (std::size_t s = 0; s < busy.size(); ++s) in_step[s] = busy[s] - (s < last_busy.size() ? last_busy[s] : 0.0);
        line["busy_s"] = in_step;
        last_busy = std::move(busy);
      }
      metrics.write(line);
    }
    last_elapsed = p.elapsed_s, last_samples = p.samples;
    if (callbacks.on_step) callbacks.on_step(p, lr);
  };
  if (!o.resume_file.empty()) outcome.resumed_at_step = resume(o, plan, runner, config);
  if (!o.checkpoint_file.empty())
    config.checkpoint = [&](const training_state& at) {
      training_state saved = at;
      saved.model_spec = o.model;
      runner.save_checkpoint(o.checkpoint_file, saved);
      say(plan) << "checkpoint of step " << saved.step << " written to " << o.checkpoint_file;
      if (plan.after_checkpoint) plan.after_checkpoint(saved.step);
    };
  if (plan.language_model && o.eval_every && plan.test_set) {
    config.evaluate_every = o.eval_every;
    config.evaluate = [&](std::uint64_t step) {
      const double loss = validation_loss(o, plan, runner, "step " + std::to_string(step));
      metrics.write({{"step", step}, {"validation_loss", loss}});
      if (callbacks.on_validation) callbacks.on_validation(step, loss);
    };
  }
  outcome.report = train(runner, *plan.train_set, plan.test_set.get(), config);
  outcome.curve.epochs = epoch_points.finish();
  return outcome;
}

}  // namespace ap::engine_parts

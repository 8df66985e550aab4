#include "training/trainer.hpp"

#include <chrono>
#include <cstdio>

namespace ap {

local_runner::local_runner(sequential& model, const optimizer_config& optimizer, const std::string& loss)
    : model_(model), optimizer_(make_optimizer(optimizer)), loss_(make_loss(loss)) {}

float local_runner::train_step(const tensor& inputs, const tensor& labels, std::uint64_t step) {
  model_.zero_grad();
  sequential_cache cache;
  const tensor output = model_.forward(inputs, cache, forward_context{true, step, 0});
  const float batch_loss = loss_->compute_loss(output, labels);
  model_.backward(loss_->compute_gradient(output, labels), cache, /*need_input_grad=*/false);
  optimizer_->step(model_.parameters());
  return batch_loss;
}

tensor local_runner::predict(const tensor& inputs) { return model_.forward(inputs); }

double evaluate_accuracy(step_runner& runner, const dataset& d, std::size_t batch_size) {
  if (d.size() == 0) return 0.0;
  std::vector<std::size_t> order(d.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::size_t correct = 0;
  for (std::size_t b = 0; b < batch_count(d.size(), batch_size); ++b) {
    const batch bt = make_batch(d, order, b, batch_size);
    correct += count_correct(runner.predict(bt.inputs), bt.labels);
  }
  return static_cast<double>(correct) / static_cast<double>(d.size());
}

train_report train(step_runner& runner, const dataset& train_set, const dataset& test_set,
                   const train_config& config) {
  using clock = std::chrono::steady_clock;
  train_report report;
  const auto start = clock::now();
  const std::size_t batches = batch_count(train_set.size(), config.batch_size);
  bool done = false;
  for (std::size_t epoch = 0; epoch < config.epochs && !done; ++epoch) {
    const auto order = epoch_order(train_set.size(), config.seed, epoch);
    double loss_sum = 0.0;
    std::size_t epoch_steps = 0;
    for (std::size_t b = 0; b < batches; ++b) {
      if (config.max_steps && report.steps >= config.max_steps) { done = true; break; }
      const batch bt = make_batch(train_set, order, b, config.batch_size);
      loss_sum += runner.train_step(bt.inputs, bt.labels, report.steps);
      ++report.steps, ++epoch_steps;
      report.samples += rows(bt.inputs);
    }
    if (epoch_steps == 0) break;
    report.epoch_losses.push_back(loss_sum / static_cast<double>(epoch_steps));
    report.final_loss = report.epoch_losses.back();
    if (config.log) {
      char line[160];
      std::snprintf(line, sizeof line, "epoch %zu: mean loss %.4f over %zu steps, %.1f s", epoch + 1,
                    report.final_loss, epoch_steps,
                    std::chrono::duration<double>(clock::now() - start).count());
      config.log(line);
    }
  }
  report.wall_s = std::chrono::duration<double>(clock::now() - start).count();
  report.samples_per_s = report.wall_s > 0 ? static_cast<double>(report.samples) / report.wall_s : 0.0;
  report.test_accuracy = evaluate_accuracy(runner, test_set);
  return report;
}

}  // namespace ap

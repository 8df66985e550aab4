// Optimizers: each holds its own per-parameter state, so every stage can own one.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "model/layer.hpp"
#include "model/lr_schedule.hpp"

namespace ap {

// Plain settings, copied to every stage to build its own optimizer.
struct optimizer_config {
  std::string kind = "adam";  // sgd, adam, adamw
  float lr = 1e-3f;
  float momentum = 0.0f;      // sgd
  bool nesterov = false;      // sgd
  float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;  // adam, adamw
  float weight_decay = 0.0f;  // sgd and adam: added to the gradient (L2); adamw: decoupled
  // Note [lr from the optimizer's steps].
  lr_schedule schedule;
};

class optimizer {
 public:
  virtual ~optimizer() = default;
  // One update of every parameter from its gradient; state is keyed by parameter name.
  void step(const std::vector<parameter>& params) { step_part(params, 0, 1); }
  // The same update of elements shard_rows(size, parts, part) of every parameter (flat) and its state; `parts`
  // optimizers each running one part give step()'s bits (Note [shared optimizer step]).
  virtual void step_part(const std::vector<parameter>& params, std::size_t part, std::size_t parts) = 0;
  // Named state tensors ("3.weight.m") for checkpoints, and the step count.
  virtual std::map<std::string, tensor*> state() = 0;
  // Creates as zeros the state step() would create lazily, so a checkpoint can be loaded into it. Throws
  // std::invalid_argument for a parameter without a value.
  virtual void init_state(const std::vector<parameter>& params) = 0;
  long steps() const { return steps_; }
  void set_steps(long steps) { steps_ = steps; }

 protected:
  long steps_ = 0;
};

// Throws std::invalid_argument naming a bad kind, a non-positive learning rate or a bad schedule
// (check_lr_schedule, the run's length unknown).
std::unique_ptr<optimizer> make_optimizer(const optimizer_config& config);

}  // namespace ap

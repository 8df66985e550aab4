// Learning-rate schedules (Note [lr from the optimizer's steps]).
#pragma once

#include <cstdint>
#include <string>

namespace ap {

struct optimizer_config;  // model/optimizer.hpp

// Note [lr from the optimizer's steps]: the lr is a pure function of the optimizer's own update count, which
// checkpoints and recovery restore, so a resumed run continues the schedule and every stage, replica and rank
// computes the same lr with no message. PyTorch's / nanoGPT's formulas: update s < W (warmup) runs at
// lr * (s + 1) / W; then, with p = (s - W) / (decay_steps - W) and min_lr from decay_steps on,
//   cosine: min_lr + 0.5 * (1 + cos(pi * p)) * (lr - min_lr);  linear: min_lr + (1 - p) * (lr - min_lr);
//   step:   lr * gamma^floor((s - W) / step_size);  constant: lr.
struct lr_schedule {
  std::string kind = "constant";   // constant, cosine, linear, step
  std::uint64_t warmup_steps = 0;  // linear warmup before any kind
  std::uint64_t decay_steps = 0;   // cosine, linear: updates (warmup included) to reach min_lr
  float min_lr = 0.0f;             // cosine, linear
  std::uint64_t step_size = 0;     // step: updates between multiplications by gamma
  float gamma = 0.1f;              // step
};

// The lr of update `step` (from 0). Assumes check_lr_schedule passed.
float lr_at(const optimizer_config& c, std::uint64_t step);

// Throws std::invalid_argument naming the setting and value: unknown kind, min_lr outside [0, lr], decay_steps
// not above warmup_steps (cosine, linear), step_size 0 or gamma outside (0, 1] (step), warmup_steps beyond
// `total_steps` (0: not checked).
void check_lr_schedule(const optimizer_config& c, std::uint64_t total_steps = 0);

}  // namespace ap

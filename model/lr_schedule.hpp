// Learning-rate schedules: the lr of each optimizer update, a pure function of the settings and the update's
// number (Note [lr from the optimizer's steps]).
#pragma once

#include <cstdint>
#include <string>

namespace ap {

struct optimizer_config;  // model/optimizer.hpp, which holds an lr_schedule

// Note [lr from the optimizer's steps]: the schedule reads the optimizer's own count of updates taken, which a
// checkpoint and a recovery snapshot restore, so a resumed run continues the schedule where it stopped, and every
// stage of a pipeline, every data-parallel replica and tensor-parallel rank computes the same lr with no message.
// The formulas are PyTorch's and nanoGPT's get_lr: with warmup W, update s < W runs at lr * (s + 1) / W; then
//   constant: lr;
//   cosine:   min_lr + 0.5 * (1 + cos(pi * p)) * (lr - min_lr), p = (s - W) / (decay_steps - W), min_lr from
//             decay_steps on;
//   linear:   min_lr + (1 - p) * (lr - min_lr), the same p, min_lr from decay_steps on;
//   step:     lr * gamma^floor((s - W) / step_size) (StepLR counted from the warmup's end).
struct lr_schedule {
  std::string kind = "constant";   // constant, cosine, linear, step
  std::uint64_t warmup_steps = 0;  // linear warmup from 0 before any kind
  std::uint64_t decay_steps = 0;   // cosine, linear: updates from the start (warmup included) to reach min_lr
  float min_lr = 0.0f;             // cosine, linear
  std::uint64_t step_size = 0;     // step: updates between two multiplications by gamma
  float gamma = 0.1f;              // step
};

// The lr of update number `step` (from 0) under c.lr and c.schedule. Assumes check_lr_schedule passed.
float lr_at(const optimizer_config& c, std::uint64_t step);

// Throws std::invalid_argument naming the setting and its value: an unknown kind, min_lr negative or above lr,
// decay_steps unset or not above warmup_steps for cosine and linear, step_size 0 or gamma not in (0, 1] for
// step, and warmup_steps longer than `total_steps`, the run's updates (0:
// unknown, not checked).
void check_lr_schedule(const optimizer_config& c, std::uint64_t total_steps = 0);

}  // namespace ap

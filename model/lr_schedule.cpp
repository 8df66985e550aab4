#include "model/lr_schedule.hpp"

#include <cmath>
#include <stdexcept>

#include "model/optimizer.hpp"
#include "model/spec_text.hpp"

namespace ap {

namespace {
const double pi = std::acos(-1.0);
}  // namespace

float lr_at(const optimizer_config& c, std::uint64_t step) {
  const lr_schedule& s = c.schedule;
  const double lr = c.lr;
  if (step < s.warmup_steps) return static_cast<float>(lr * double(step + 1) / double(s.warmup_steps));
  if (s.kind == "cosine" || s.kind == "linear") {
    if (step >= s.decay_steps) return s.min_lr;
    const double progress = double(step - s.warmup_steps) / double(s.decay_steps - s.warmup_steps);
    const double coefficient = s.kind == "cosine" ? 0.5 * (1.0 + std::cos(pi * progress)) : 1.0 - progress;
    return static_cast<float>(double(s.min_lr) + coefficient * (lr - double(s.min_lr)));
  }
  if (s.kind == "step" && s.step_size > 0)
    return static_cast<float>(lr * std::pow(double(s.gamma), double((step - s.warmup_steps) / s.step_size)));
  return c.lr;  // constant: the lr itself, bit for bit
}

void check_lr_schedule(const optimizer_config& c, std::uint64_t total_steps) {
  const lr_schedule& s = c.schedule;
  const auto refuse = [](const std::string& what) { throw std::invalid_argument("lr schedule: " + what); };
  const bool decays = s.kind == "cosine" || s.kind == "linear";
  if (!decays && s.kind != "constant" && s.kind != "step")
    refuse("unknown kind '" + s.kind + "': expected constant, cosine, linear or step");
  if (!(s.min_lr >= 0.0f) || !std::isfinite(s.min_lr))
    refuse("min_lr " + format_float(s.min_lr) + " is not a non-negative number");
  if (s.min_lr > c.lr) refuse("min_lr " + format_float(s.min_lr) + " is above the learning rate " + format_float(c.lr));
  if (decays) {
    if (s.decay_steps <= s.warmup_steps)
      refuse("decay_steps " + std::to_string(s.decay_steps) + " must be above warmup_steps " +
             std::to_string(s.warmup_steps) + " for " + s.kind + " (the update at which it reaches min_lr)");
  }
  if (s.kind == "step") {
    if (s.step_size == 0) refuse("step_size 0 must be positive for step");
    if (!(s.gamma > 0.0f && s.gamma <= 1.0f)) refuse("gamma " + format_float(s.gamma) + " is not in (0, 1]");
  }
  if (total_steps == 0) return;
  if (s.warmup_steps > total_steps)
    refuse("warmup_steps " + std::to_string(s.warmup_steps) + " is longer than the run (" +
           std::to_string(total_steps) + " steps)");
}

}  // namespace ap

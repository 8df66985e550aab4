// The loss curve of a run as an SVG picture (train --plot): every step's batch loss, and each epoch's mean.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ap {

struct loss_curve {
  struct point {
    double step;  // x: the global step (an epoch's mean sits at its last step)
    double loss;
  };
  std::vector<point> steps;   // one per step, in order
  std::vector<point> epochs;  // one per finished (or last, partly run) epoch
};

// A light line through the step losses, a dark line with dots through the epoch means, axes with ticks.
// Throws std::invalid_argument when `curve` has no step.
std::string to_svg(const loss_curve& curve, const std::string& title);

}  // namespace ap

// Clipping by the global gradient norm: one norm over the whole model, however it is split.
#pragma once

#include <functional>
#include <vector>

#include "model/layer.hpp"

namespace ap {

// Note [global gradient clipping]: as PyTorch's clip_grad_norm_, gradients are multiplied by
// min(1, max_norm / (norm + 1e-6)). A split model adds its pieces' sums of squares, each element once: a
// tensor-parallel rank counts its shards and, on rank 0 only, the whole tensors; replicas hold equal
// gradients, so one counts. Sums are in double in fixed order (square_sum), independent of thread counts.
double gradient_square_sum(const std::vector<parameter>& params,
                           const std::function<bool(const parameter&)>& counted = nullptr);
// min(1, max_norm / (sqrt(square_sum) + 1e-6)); 1 for max_norm 0.
float clip_factor(double square_sum, float max_norm);
void scale_gradients(const std::vector<parameter>& params, float factor);

}  // namespace ap

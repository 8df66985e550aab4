// Clipping by the global gradient norm (--clip-grad-norm): one norm over every parameter of the model,
// however it is split into stages, tensor-parallel shards or replicas.
#pragma once

#include <functional>
#include <vector>

#include "model/layer.hpp"

namespace ap {

// Note [global gradient clipping]: like PyTorch's clip_grad_norm_, every gradient is multiplied by
// min(1, max_norm / (norm + 1e-6)), norm = sqrt(sum of squares of all gradients). A split model adds its
// pieces' sums of squares before the square root, each element counted once: a tensor-parallel rank
// counts its shards and, on rank 0 only, the whole tensors every rank holds; data-parallel replicas hold
// the same (all-reduced) gradients, so one replica's sum is the sum. Sums are in double, in parameter
// order, each parameter's in fixed blocks added in order (square_sum in tensor/elementwise.hpp), so the
// result does not depend on thread counts.
double gradient_square_sum(const std::vector<parameter>& params,
                           const std::function<bool(const parameter&)>& counted = nullptr);
// The factor gradients are multiplied by: min(1, max_norm / (sqrt(square_sum) + 1e-6)); 1 for max_norm 0.
float clip_factor(double square_sum, float max_norm);
void scale_gradients(const std::vector<parameter>& params, float factor);

}  // namespace ap

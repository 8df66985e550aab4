#include "model/grad_clip.hpp"

#include <algorithm>
#include <cmath>

#include "tensor/compute.hpp"
#include "tensor/elementwise.hpp"

namespace ap {

double gradient_square_sum(const std::vector<parameter>& params, const std::function<bool(const parameter&)>& counted) {
  std::vector<float_span> grads;
  for (const parameter& p : params)
    if (!counted || counted(p)) grads.push_back({p.grad->data(), p.grad->size()});
  double sum = 0.0;
  for (const double s : square_sums(grads)) sum += s;  // tensor/elementwise.hpp: fixed blocks, in order
  return sum;
}

float clip_factor(double square_sum, float max_norm) {
  if (max_norm <= 0.0f) return 1.0f;
  return static_cast<float>(std::min(1.0, double(max_norm) / (std::sqrt(square_sum) + 1e-6)));
}

void scale_gradients(const std::vector<parameter>& params, float factor) {
  if (factor == 1.0f) return;
  for (const parameter& p : params) {
    float* g = p.grad->data();
    const auto n = static_cast<std::ptrdiff_t>(p.grad->size());
#pragma omp parallel for simd schedule(static) if (n >= parallel_elements)
    for (std::ptrdiff_t i = 0; i < n; ++i) g[i] *= factor;
  }
}

}  // namespace ap

#include "model/grad_clip.hpp"

#include <algorithm>
#include <cmath>

namespace ap {

double gradient_square_sum(const std::vector<parameter>& params, const std::function<bool(const parameter&)>& counted) {
  double sum = 0.0;
  for (const parameter& p : params) {
    if (counted && !counted(p)) continue;
    const float* g = p.grad->data();
    for (std::size_t i = 0; i < p.grad->size(); ++i) sum += double(g[i]) * double(g[i]);
  }
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
    for (std::size_t i = 0; i < p.grad->size(); ++i) g[i] *= factor;
  }
}

}  // namespace ap

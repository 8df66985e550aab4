#include "model/gelu.hpp"

#include <cmath>

namespace ap {

namespace {
constexpr float gelu_scale = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float gelu_cubic = 0.044715f;
}  // namespace

tensor gelu::forward(const tensor& x, layer_cache& cache, const forward_context&) const {
  tensor y = tensor::from_shape(x.shape());
  const float* px = x.data();
  float* py = y.data();
  for (std::size_t i = 0; i < x.size(); ++i) {
    const float v = px[i];
    py[i] = 0.5f * v * (1.0f + std::tanh(gelu_scale * (v + gelu_cubic * v * v * v)));
  }
  cache.emplace<saved>().x = x;
  return y;
}

void gelu::backward_input(const tensor& dy, layer_cache& cache, tensor* dx) const {
  const tensor& x = cache.get<saved>(*this).x;
  check_dy_shape(dy, shape_of(x), *this);
  if (!dx) return;
  float* pdx = accumulate_into(*dx, shape_of(x), *this);
  const float* px = x.data();
  const float* pdy = dy.data();
  for (std::size_t i = 0; i < dy.size(); ++i) {
    const float v = px[i];
    const float t = std::tanh(gelu_scale * (v + gelu_cubic * v * v * v));
    const float sech2 = 1.0f - t * t;
    const float local = 0.5f * (1.0f + t) + 0.5f * v * sech2 * gelu_scale * (1.0f + 3.0f * gelu_cubic * v * v);
    pdx[i] += local * pdy[i];
  }
}

}  // namespace ap

#include "model/gelu.hpp"

#include <cmath>
#include <vector>

#include "tensor/compute.hpp"
#include "tensor/elementwise.hpp"
#include "tensor/nn_ops.hpp"

namespace ap {

void gelu::apply(const float* x, float* y, std::size_t n) const {
  if (!exact_) return gelu_forward(x, y, n);  // tensor/nn_ops.hpp: oneDNN's JIT kernel, or the reference loop
  const auto count = static_cast<std::ptrdiff_t>(n);
#pragma omp parallel for schedule(static) if (count >= parallel_elements)
  for (std::ptrdiff_t i = 0; i < count; ++i) y[i] = 0.5f * x[i] * (1.0f + std::erf(x[i] * 0.70710678118654752f));
}

void gelu::derivative(const float* x, const float* dy, float* dx, std::size_t n) const {
  if (!exact_) return gelu_backward(x, dy, dx, n);
  const auto count = static_cast<std::ptrdiff_t>(n);
#pragma omp parallel for schedule(static) if (count >= parallel_elements)
  for (std::ptrdiff_t i = 0; i < count; ++i) {
    const float v = x[i];  // d/dx x Phi(x) = Phi(x) + x phi(x)
    const float cdf = 0.5f * (1.0f + std::erf(v * 0.70710678118654752f));
    const float pdf = 0.39894228040143268f * std::exp(-0.5f * v * v);
    dx[i] = (cdf + v * pdf) * dy[i];
  }
}

tensor gelu::forward(const tensor& x, layer_cache& cache, const forward_context&) const {
  tensor y = tensor::from_shape(x.shape());
  apply(x.data(), y.data(), x.size());
  stash_as(cache.emplace<saved>().x, x, compute_dtype());  // Note [compute dtype]
  return y;
}

tensor gelu::forward_owned(tensor&& x, layer_cache& cache, const forward_context& ctx) const {
  if (compute_dtype() != dtype::float32) return forward(x, cache, ctx);
  tensor y = tensor::from_shape(x.shape());
  apply(x.data(), y.data(), x.size());
  cache.emplace<saved>().x = std::move(x);  // the stash, uncopied (Note [owned input])
  return y;
}

void gelu::backward_input(const tensor& dy, layer_cache& cache, tensor* dx) const {
  tensor scratch;
  const tensor& x = float32_view(cache.get<saved>(*this).x, scratch);
  check_dy_shape(dy, shape_of(x), *this);
  if (!dx) return;
  bool fresh = false;
  float* pdx = accumulate_into(*dx, shape_of(x), *this, &fresh);
  if (fresh) {
    derivative(x.data(), dy.data(), pdx, dy.size());
    return;
  }
  // The kernel assigns, so a dx that already holds a gradient adds a fresh one (Note [dx accumulates]).
  tensor local = tensor::from_shape(x.shape());
  derivative(x.data(), dy.data(), local.data(), dy.size());
  const float* pl = local.data();
  add_into(pdx, pl, local.size());
}

}  // namespace ap

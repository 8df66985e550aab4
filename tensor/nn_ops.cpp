#include "tensor/nn_ops.hpp"

#include <cmath>

#include "tensor/compute.hpp"
#include "tensor/fast_exp.hpp"

namespace ap {
namespace {

constexpr float gelu_scale = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float gelu_cubic = 0.044715f;

bool on_onednn() { return current_compute_backend() == compute_backend::onednn; }

// sigmoid(2u) and 1 - sigmoid(2u) for GELU's u = sqrt(2/pi) (v + 0.044715 v^3), each as its own quotient
// (Note [GELU on vector lanes]).
struct gelu_sigmoids {
  float s, rest;
};
inline gelu_sigmoids gelu_sigmoid(float v) {
  const float u = gelu_scale * (v + gelu_cubic * v * v * v);
  const float e = exp_nonpositive(-2.0f * std::fabs(u)), inv = 1.0f / (1.0f + e);
  return u >= 0.0f ? gelu_sigmoids{inv, e * inv} : gelu_sigmoids{e * inv, inv};
}

}  // namespace

// Note [GELU on vector lanes]: 0.5 (1 + tanh(u)) is the sigmoid of 2u, so with e = e^(-2|u|) GELU(x) = x s where
// s = 1 / (1 + e) for u >= 0 and e / (1 + e) below: no cancelling 1 - e and no tanh call, so the loop runs on
// vector lanes (Note [trapping math]), faster than oneDNN's eltwise. The derivative is s + 2 x s (1 - s) u'.
void gelu_forward(const float* x, float* y, std::size_t n) {
  const auto count = static_cast<std::ptrdiff_t>(n);
#pragma omp parallel for simd schedule(static) if (count >= parallel_elements)  // Note [parallel element loops]
  for (std::ptrdiff_t i = 0; i < count; ++i) y[i] = x[i] * gelu_sigmoid(x[i]).s;
}

void gelu_backward(const float* x, const float* dy, float* dx, std::size_t n) {
  const auto count = static_cast<std::ptrdiff_t>(n);
#pragma omp parallel for simd schedule(static) if (count >= parallel_elements)
  for (std::ptrdiff_t i = 0; i < count; ++i) {
    const float v = x[i];
    const auto [s, rest] = gelu_sigmoid(v);
    dx[i] = (s + 2.0f * v * s * rest * gelu_scale * (1.0f + 3.0f * gelu_cubic * v * v)) * dy[i];
  }
}

void layer_norm_forward(const float* x, const float* gamma, const float* beta, float eps, std::size_t rows,
                        std::size_t cols, float* y, float* mean, float* rstd) {
  if (on_onednn())
    layer_norm_forward_onednn(x, gamma, beta, eps, rows, cols, y, mean, rstd);
  else
    layer_norm_forward_reference(x, gamma, beta, eps, rows, cols, y, mean, rstd);
}

void gelu_forward_reference(const float* x, float* y, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    const float v = x[i];
    y[i] = 0.5f * v * (1.0f + std::tanh(gelu_scale * (v + gelu_cubic * v * v * v)));
  }
}

void gelu_backward_reference(const float* x, const float* dy, float* dx, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    const float v = x[i];
    const float t = std::tanh(gelu_scale * (v + gelu_cubic * v * v * v));
    const float sech2 = 1.0f - t * t;
    const float local = 0.5f * (1.0f + t) + 0.5f * v * sech2 * gelu_scale * (1.0f + 3.0f * gelu_cubic * v * v);
    dx[i] = local * dy[i];
  }
}

void layer_norm_forward_reference(const float* x, const float* gamma, const float* beta, float eps, std::size_t rows,
                                  std::size_t cols, float* y, float* mean, float* rstd) {
  const std::size_t c = cols;
  for (std::size_t r = 0; r < rows; ++r) {
    const float* xr = x + r * c;
    float* yr = y + r * c;
    // Two passes (mean, then squared deviations): one-pass E[x^2] - E[x]^2 cancels badly in float.
    double sum = 0.0;
    for (std::size_t i = 0; i < c; ++i) sum += xr[i];
    const float m = static_cast<float>(sum / double(c));
    double sq = 0.0;
    for (std::size_t i = 0; i < c; ++i) sq += double(xr[i] - m) * double(xr[i] - m);
    const float s = 1.0f / std::sqrt(static_cast<float>(sq / double(c)) + eps);
    for (std::size_t i = 0; i < c; ++i) yr[i] = (xr[i] - m) * s * gamma[i] + beta[i];
    mean[r] = m;
    rstd[r] = s;
  }
}

}  // namespace ap

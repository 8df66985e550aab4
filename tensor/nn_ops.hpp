// Neural-network ops besides the matrix product, on the compute backend (Note [compute backends]): where
// oneDNN measured faster than our loops, it runs them; the loops are the reference path.
// Measured here (one thread, fp32, (256, 2048), loaded machine): GELU forward 0.4 ms on oneDNN's JIT vs
// ~66 ms for the scalar std::tanh loop, backward 0.6 vs ~80 ms; layer norm forward 0.15 vs 1.1 ms. ReLU is a
// tie (0.056 vs 0.058 ms: memory-bound), so it stays a plain loop in model/relu.cpp.
#pragma once

#include <cstddef>

namespace ap {

// y = GELU(x), tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). n elements.
void gelu_forward(const float* x, float* y, std::size_t n);
// dx = GELU'(x) * dy (assigns dx).
void gelu_backward(const float* x, const float* dy, float* dx, std::size_t n);

// Layer normalisation over each row of x (rows, cols): y = (x - mean) * rstd * gamma + beta, with
// rstd = 1 / sqrt(variance + eps) (biased variance). Writes y (rows, cols), mean (rows) and rstd (rows).
void layer_norm_forward(const float* x, const float* gamma, const float* beta, float eps, std::size_t rows,
                        std::size_t cols, float* y, float* mean, float* rstd);

// The same ops on a named backend (tests compare the two). The *_onednn ones throw std::logic_error in a
// build without oneDNN.
void gelu_forward_reference(const float* x, float* y, std::size_t n);
void gelu_backward_reference(const float* x, const float* dy, float* dx, std::size_t n);
void layer_norm_forward_reference(const float* x, const float* gamma, const float* beta, float eps, std::size_t rows,
                                  std::size_t cols, float* y, float* mean, float* rstd);
void gelu_forward_onednn(const float* x, float* y, std::size_t n);
void gelu_backward_onednn(const float* x, const float* dy, float* dx, std::size_t n);
void layer_norm_forward_onednn(const float* x, const float* gamma, const float* beta, float eps, std::size_t rows,
                               std::size_t cols, float* y, float* mean, float* rstd);

}  // namespace ap

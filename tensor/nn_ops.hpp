// Neural-network ops besides the matrix product: layer norm's forward on the compute backend, GELU as a vector
// loop (Note [GELU on vector lanes]). ReLU is memory-bound and stays a plain loop.
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

// GELU with std::tanh, one element at a time: the tests' oracle.
void gelu_forward_reference(const float* x, float* y, std::size_t n);
void gelu_backward_reference(const float* x, const float* dy, float* dx, std::size_t n);
// Layer norm on a named backend (tests compare the two); the _onednn one throws std::logic_error without oneDNN.
void layer_norm_forward_reference(const float* x, const float* gamma, const float* beta, float eps, std::size_t rows,
                                  std::size_t cols, float* y, float* mean, float* rstd);
void layer_norm_forward_onednn(const float* x, const float* gamma, const float* beta, float eps, std::size_t rows,
                               std::size_t cols, float* y, float* mean, float* rstd);

}  // namespace ap

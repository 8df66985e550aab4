// Batched matrix products (Note [compute backends]): `batch` independent products of equal shapes stored one
// after another, as attention's per-head products; one oneDNN 3-D matmul runs the whole batch.

// Note [one place for attention's products]: the attention layer computes its scores and weighted values only
// through batched_gemm, so a compute dtype is one overload here, not a change inside the layer.
#pragma once

#include <cstddef>

#include "tensor/bfloat16.hpp"

namespace ap {

// For every b < batch: C_b (m, n) = alpha * op(A_b) * op(B_b) + beta * C_b, with A_b = a + b*m*k, B_b = b + b*k*n,
// C_b = c + b*m*n, dense row-major (A_b transposed is stored (k, m), B_b (n, k)). With beta == 0, C is only written.
void batched_gemm(bool transpose_a, bool transpose_b, std::size_t batch, std::size_t m, std::size_t n,
                  std::size_t k, float alpha, const float* a, const float* b, float beta, float* c);

// The same with bf16 A and B: fp32 accumulation and C (Note [compute dtype]).
void batched_gemm(bool transpose_a, bool transpose_b, std::size_t batch, std::size_t m, std::size_t n,
                  std::size_t k, float alpha, const bfloat16* a, const bfloat16* b, float beta, float* c);
void batched_gemm_reference(bool transpose_a, bool transpose_b, std::size_t batch, std::size_t m, std::size_t n,
                            std::size_t k, float alpha, const bfloat16* a, const bfloat16* b, float beta, float* c);
void batched_gemm_onednn(bool transpose_a, bool transpose_b, std::size_t batch, std::size_t m, std::size_t n,
                         std::size_t k, float alpha, const bfloat16* a, const bfloat16* b, float beta, float* c);
// The same on a named backend (tests compare the two). batched_gemm_onednn throws std::logic_error in a
// build without oneDNN.
void batched_gemm_reference(bool transpose_a, bool transpose_b, std::size_t batch, std::size_t m, std::size_t n,
                            std::size_t k, float alpha, const float* a, const float* b, float beta, float* c);
void batched_gemm_onednn(bool transpose_a, bool transpose_b, std::size_t batch, std::size_t m, std::size_t n,
                         std::size_t k, float alpha, const float* a, const float* b, float beta, float* c);

}  // namespace ap

// Batched matrix products on the compute backend (Note [compute backends] in compute.hpp): `batch` independent
// products of equal shapes stored one after another, as attention's per-head products are. One oneDNN matmul
// primitive runs the whole batch (a 3-D matmul), so small per-head products (128 x 128 x 32) do not each pay a
// call; the reference path loops gemm_reference over the batch and is the tests' oracle.

// Note [one place for attention's products]: the attention layer computes its scores and its weighted values
// only through batched_gemm, so a compute dtype (bf16 inputs, fp32 accumulation, as gemm already takes) is
// one overload here, not a change inside the layer.
#pragma once

#include <cstddef>

#include "tensor/bfloat16.hpp"

namespace ap {

// For every b < batch: C_b (m, n) = alpha * op(A_b) * op(B_b) + beta * C_b, with A_b = a + b*m*k, B_b = b +
// b*k*n, C_b = c + b*m*n, each dense row-major; op = transpose when the flag is set (A_b is then stored (k, m),
// B_b (n, k)). With beta == 0, C is only written. Runs on current_compute_backend().
void batched_gemm(bool transpose_a, bool transpose_b, std::size_t batch, std::size_t m, std::size_t n,
                  std::size_t k, float alpha, const float* a, const float* b, float beta, float* c);

// The same with bf16 A and B: products accumulate in fp32, C stays fp32 (Note [compute dtype] in
// model/layer.hpp: attention's products in bfloat16).
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

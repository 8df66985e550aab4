// Matrix products on the compute backend (Note [compute backends]): oneDNN's matmul primitive, or xtensor-blas
// as the reference. fp32, and bf16 inputs with fp32 accumulation and output.
#pragma once

#include <cstddef>

#include "tensor/bfloat16.hpp"
#include "tensor/tensor.hpp"

namespace ap {

// C (m, n) = alpha * op(A) * op(B) + beta * C, dense row-major raw pointers; op = transpose when the flag is
// set. A is (m, k) or, transposed, stored (k, m); B is (k, n) or, transposed, stored (n, k). With beta == 0,
// C is only written (it may hold NaN). Runs on current_compute_backend().
void gemm(bool transpose_a, bool transpose_b, std::size_t m, std::size_t n, std::size_t k, float alpha,
          const float* a, const float* b, float beta, float* c);
// The same with bf16 A and B: products accumulate in fp32, C stays fp32.
void gemm(bool transpose_a, bool transpose_b, std::size_t m, std::size_t n, std::size_t k, float alpha,
          const bfloat16* a, const bfloat16* b, float beta, float* c);

// Note [bias in the product]: C (m, n) = A (m, k) B (k, n) + bias (n) on every row: a Linear's forward. It gives
// the bits of fill_rows(c, m, bias, n) followed by gemm(..., beta = 1, c) on every backend: oneDNN adds the bias
// in the product's epilogue, one fp32 add after the whole sum, as its sum post-op would add C (elsewhere it is
// that fill and product). So C is written once instead of filled, read back and written again.
void gemm_bias(std::size_t m, std::size_t n, std::size_t k, const float* a, const float* b, const float* bias, float* c);
// The same with bf16 A and B (fp32 sums, bias and C): the bits of the fill and the bf16 gemm with beta = 1.
void gemm_bias(std::size_t m, std::size_t n, std::size_t k, const bfloat16* a, const bfloat16* b, const float* bias,
               float* c);

// Note [widened bf16 operands]: where the backend's bf16 products widen their operands to fp32
// (bf16_products_widen(): the reference backend, and oneDNN without AVX-512, Note [bf16 without AVX-512]), an
// operand used again and again (a Linear's weights) is better widened once. gemm_widened_b takes such a B:
// float32 elements that are all bf16 values, with A in bf16, and gives the bf16 product's bits. Where bf16
// products do not widen, B is narrowed (exactly) and the bf16 product runs.
bool bf16_products_widen();
void gemm_widened_b(bool transpose_a, bool transpose_b, std::size_t m, std::size_t n, std::size_t k, float alpha,
                    const bfloat16* a, const float* b, float beta, float* c);

// The same products on a named backend, whatever current_compute_backend() says (tests and benchmarks compare
// the two). The reference bf16 product is the exact products of the bf16 values, summed in fp32 by sgemm.
// gemm_onednn throws std::logic_error in a build without oneDNN.
void gemm_reference(bool transpose_a, bool transpose_b, std::size_t m, std::size_t n, std::size_t k, float alpha,
                    const float* a, const float* b, float beta, float* c);
void gemm_reference(bool transpose_a, bool transpose_b, std::size_t m, std::size_t n, std::size_t k, float alpha,
                    const bfloat16* a, const bfloat16* b, float beta, float* c);
void gemm_onednn(bool transpose_a, bool transpose_b, std::size_t m, std::size_t n, std::size_t k, float alpha,
                 const float* a, const float* b, float beta, float* c);
void gemm_onednn(bool transpose_a, bool transpose_b, std::size_t m, std::size_t n, std::size_t k, float alpha,
                 const bfloat16* a, const bfloat16* b, float beta, float* c);
// gemm_bias on oneDNN (Note [bias in the product]).
void gemm_bias_onednn(std::size_t m, std::size_t n, std::size_t k, const float* a, const float* b, const float* bias,
                      float* c);
void gemm_bias_onednn(std::size_t m, std::size_t n, std::size_t k, const bfloat16* a, const bfloat16* b,
                      const float* bias, float* c);
// oneDNN runs bfloat16 products on AMX tiles here (false without oneDNN); then a weight gradient's bits depend
// on the team size (Note [rows split among the team]).
bool onednn_uses_amx();
// oneDNN runs its AVX-512 kernels here (false without them or without oneDNN). Without them bf16 products widen
// (Note [bf16 without AVX-512]) and fp32 products run on OpenBLAS (Note [fp32 products on OpenBLAS without
// AVX-512]); attention's batched products stay on oneDNN's AVX2 gemm, whose bits depend on the thread count.
bool onednn_avx512();

// out = op(a) @ op(b) for 2-D views (rows(), cols()) of any-rank tensors; shapes are checked and named.
// With accumulate, out must already have the result shape and the product is added to it.
void matmul(const tensor& a, bool transpose_a, const tensor& b, bool transpose_b, tensor& out,
            bool accumulate = false);

}  // namespace ap

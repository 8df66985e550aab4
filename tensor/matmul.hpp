// Matrix products on the compute backend (Note [compute backends]): fp32, and bf16 inputs with fp32 accumulation.
#pragma once

#include <cstddef>

#include "tensor/bfloat16.hpp"
#include "tensor/tensor.hpp"

namespace ap {

// C (m, n) = alpha * op(A) * op(B) + beta * C, dense row-major; op = transpose when the flag is set (A then stored
// (k, m), B (n, k)). With beta == 0, C is only written (it may hold NaN).
void gemm(bool transpose_a, bool transpose_b, std::size_t m, std::size_t n, std::size_t k, float alpha,
          const float* a, const float* b, float beta, float* c);
// The same with bf16 A and B: products accumulate in fp32, C stays fp32.
void gemm(bool transpose_a, bool transpose_b, std::size_t m, std::size_t n, std::size_t k, float alpha,
          const bfloat16* a, const bfloat16* b, float beta, float* c);

// Note [bias in the product]: C (m, n) = A (m, k) B (k, n) + bias (n) on every row: a Linear's forward, with the
// bits of fill_rows(c, m, bias, n) then gemm(..., beta = 1, c) on every backend. oneDNN adds the bias in the
// product's epilogue, one fp32 add after the whole sum, so C is written once instead of filled and rewritten.
void gemm_bias(std::size_t m, std::size_t n, std::size_t k, const float* a, const float* b, const float* bias, float* c);
// The same with bf16 A and B: the bits of the fill and the bf16 gemm with beta = 1.
void gemm_bias(std::size_t m, std::size_t n, std::size_t k, const bfloat16* a, const bfloat16* b, const float* bias,
               float* c);

// Note [widened bf16 operands]: where bf16 products widen their operands to fp32 (bf16_products_widen()), an
// operand used again and again (a Linear's weights) is better widened once: gemm_widened_b takes such a B (float32
// holding bf16 values) and gives the bf16 product's bits.
bool bf16_products_widen();
void gemm_widened_b(bool transpose_a, bool transpose_b, std::size_t m, std::size_t n, std::size_t k, float alpha,
                    const bfloat16* a, const float* b, float beta, float* c);

// The same products on a named backend (tests and benchmarks compare the two). gemm_onednn throws
// std::logic_error in a build without oneDNN.
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
// oneDNN runs bfloat16 products on AMX tiles here (Note [rows split among the team]).
bool onednn_uses_amx();
// oneDNN runs its AVX-512 kernels here (false without them or without oneDNN): Note [bf16 without AVX-512],
// Note [fp32 products on OpenBLAS without AVX-512].
bool onednn_avx512();

// out = op(a) @ op(b) for 2-D views (rows(), cols()) of any-rank tensors; shapes are checked and named. With
// accumulate, the product is added to out, which must have the result shape.
void matmul(const tensor& a, bool transpose_a, const tensor& b, bool transpose_b, tensor& out,
            bool accumulate = false);

}  // namespace ap

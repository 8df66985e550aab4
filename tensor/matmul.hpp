// Matrix products on the compute backend (Note [compute backends] in compute.hpp): oneDNN's matmul primitive
// (OpenBLAS's sgemm in bands where oneDNN has no AVX-512 kernels), or xtensor-blas (OpenBLAS sgemm) as the
// reference. fp32, and bf16 inputs with fp32 accumulation and output.
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

// Note [bias in the product]: C (m, n) = A (m, k) B (k, n) + bias, the bias (n) added to every row: a Linear's
// forward. It gives the bits of fill_rows(c, m, bias, n) followed by gemm(false, false, ..., beta = 1, c), on
// every backend: oneDNN's matmul adds the bias in the product's epilogue, one fp32 add after the whole sum, as
// its sum post-op adds C there (and where oneDNN has no AVX-512 kernels, or on the reference backend, it is
// that fill and product). So C is written once, where the fill wrote all of it and the product read it back
// and wrote it again: stand-alone on the 2-vCPU Sapphire Rapids VM, one thread, 8192 x 256 x 1024 (the GPT's
// MLP up-projection) 55.3 -> 49.8 ms, 8192 x 256 x 768 (its QKV) 43.0 -> 40.5; 1024 x 2048 x 2048 unchanged.
void gemm_bias(std::size_t m, std::size_t n, std::size_t k, const float* a, const float* b, const float* bias, float* c);
// The same with bf16 A and B (fp32 sums, bias and C): the bits of the fill and the bf16 gemm with beta = 1. On
// AMX (bf16, one thread, stand-alone): 8192 x 256 x 1024 29.1 -> 23.4 ms, 8192 x 256 x 768 20.3 -> 13.3.
void gemm_bias(std::size_t m, std::size_t n, std::size_t k, const bfloat16* a, const bfloat16* b, const float* bias,
               float* c);

// Note [widened bf16 operands]: where the current backend's bf16 products widen their operands to fp32 and run
// fp32 products (bf16_products_widen(): the reference backend, and oneDNN without AVX-512, Note [bf16 without
// AVX-512] in matmul_onednn.cpp), an operand multiplied again and again (a Linear's weights, every microbatch,
// forward and backward) is better kept widened once than widened at every product. gemm_widened_b takes such
// a B: float32 elements that are all bf16 values (round_to_bfloat16's output), with A in bf16, and computes
// the bf16 overload's product of A and B's bf16 values: the same bits. Where bf16 products widen, only A is
// widened; elsewhere B is narrowed (exactly) and the bf16 product runs (correct, but then a caller keeps B in
// bf16 instead).
bool bf16_products_widen();
void gemm_widened_b(bool transpose_a, bool transpose_b, std::size_t m, std::size_t n, std::size_t k, float alpha,
                    const bfloat16* a, const float* b, float beta, float* c);

// The same products on a named backend, whatever current_compute_backend() says (tests and benchmarks
// compare the two). The reference bf16 product widens A and B to fp32 and runs sgemm: the exact products of
// the bf16 values, summed in fp32. gemm_onednn throws std::logic_error in a build without oneDNN.
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
// oneDNN runs bfloat16 products on AMX tiles on this processor (false without oneDNN). There its product of a
// transposed A longer than 256 (a weight gradient) has the bits of the team size it ran on (Note [rows split
// among the team] in matmul_onednn.cpp).
bool onednn_uses_amx();
// oneDNN runs its AVX-512 kernels on this processor (false on an AVX2 one and without oneDNN). Without them
// it makes no bf16 products, so bf16 products widen their inputs to fp32 first (Note [bf16 without AVX-512] in
// matmul_onednn.cpp), and gemm_onednn's fp32 products run on OpenBLAS (Note [fp32 products on OpenBLAS without
// AVX-512]); attention's batched products stay on oneDNN's AVX2 gemm, whose bits depend on the thread count.
bool onednn_avx512();

// out = op(a) @ op(b) for 2-D views (rows(), cols()) of any-rank tensors; shapes are checked and named.
// With accumulate, out must already have the result shape and the product is added to it.
void matmul(const tensor& a, bool transpose_a, const tensor& b, bool transpose_b, tensor& out,
            bool accumulate = false);

}  // namespace ap

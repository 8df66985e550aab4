// Matrix products on BLAS (OpenBLAS sgemm), and for few rows (pipeline microbatches) on the AVX-512 kernels
// of small_gemm.hpp. Kept in its own .cpp so <cblas.h> never meets xtensor-blas.
#pragma once

#include <cstddef>

#include "tensor/tensor.hpp"

namespace ap {

// C (m, n) = alpha * op(A) * op(B) + beta * C, row-major raw pointers; op = transpose when the flag is set.
// A is (m, k) or, transposed, stored (k, m); B is (k, n) or, transposed, stored (n, k).
// Untransposed A with few rows (small_gemm_preferred: m <= 64, or <= 128 for k >= 1024, and n, k >= 128)
// runs on the kernels of small_gemm.hpp, which stream B instead of packing it; everything else on OpenBLAS.
void gemm(bool transpose_a, bool transpose_b, std::size_t m, std::size_t n, std::size_t k, float alpha,
          const float* a, const float* b, float beta, float* c);

// The same product, always on OpenBLAS (cblas_sgemm). gemm() routes few-row products with an untransposed A
// to the AVX-512 kernels of small_gemm.hpp instead, where they measured faster; this is the reference.
void gemm_blas(bool transpose_a, bool transpose_b, std::size_t m, std::size_t n, std::size_t k, float alpha,
               const float* a, const float* b, float beta, float* c);

// out = op(a) @ op(b) for 2-D views (rows(), cols()) of any-rank tensors; shapes are checked and named.
// With accumulate, out must already have the result shape and the product is added to it.
void matmul(const tensor& a, bool transpose_a, const tensor& b, bool transpose_b, tensor& out,
            bool accumulate = false);

// Pins BLAS to one thread per caller: pipeline stages give the parallelism (toolchain notes).
void set_blas_threads(int threads);

}  // namespace ap

// GEMM kernels for few rows (a pipeline microbatch) times a large matrix, without packing the large matrix.
//
// OpenBLAS packs all of B on every sgemm call; with M = 32 rows and a 2048 x 2048 weight that packing costs
// as much as the arithmetic. These AVX-512 kernels stream B once instead:
//   nn: C (m, n) = alpha * A (m, k) * B (k, n) + beta * C    (Linear forward, y = x W)
//   nt: C (m, n) = alpha * A (m, k) * B^T + beta * C, B stored (n, k)   (Linear backward, dx = dy W^T)
// All matrices row-major with leading dimensions lda, ldb, ldc. beta == 0 never reads C (BLAS semantics).
// Without AVX-512 at compile time both fall back to cblas_sgemm. ap::gemm (matmul.hpp) decides when to use
// them (small_gemm_preferred); call these directly only to compare or test.
#pragma once

#include <cstddef>

namespace ap {

// True when the AVX-512 kernels are compiled in (the build targets a CPU with AVX-512F).
bool small_gemm_compiled();

void small_gemm_nn(std::size_t m, std::size_t n, std::size_t k, float alpha, const float* a, std::size_t lda,
                   const float* b, std::size_t ldb, float beta, float* c, std::size_t ldc);

void small_gemm_nt(std::size_t m, std::size_t n, std::size_t k, float alpha, const float* a, std::size_t lda,
                   const float* b, std::size_t ldb, float beta, float* c, std::size_t ldc);

// Whether ap::gemm routes op(A) op(B) with these sizes to the kernels above (measured: only where they
// beat OpenBLAS). Transposed A (the weight gradient) always stays on OpenBLAS.
bool small_gemm_preferred(bool transpose_a, bool transpose_b, std::size_t m, std::size_t n, std::size_t k);

}  // namespace ap

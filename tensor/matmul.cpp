#include "tensor/matmul.hpp"

#include <cblas.h>

#include <stdexcept>
#include <string>

#include "tensor/small_gemm.hpp"

namespace ap {

void gemm(bool transpose_a, bool transpose_b, std::size_t m, std::size_t n, std::size_t k, float alpha,
          const float* a, const float* b, float beta, float* c) {
  if (m == 0 || n == 0) return;
  if (small_gemm_preferred(transpose_a, transpose_b, m, n, k)) {
    if (transpose_b)
      small_gemm_nt(m, n, k, alpha, a, k, b, k, beta, c, n);
    else
      small_gemm_nn(m, n, k, alpha, a, k, b, n, beta, c, n);
    return;
  }
  gemm_blas(transpose_a, transpose_b, m, n, k, alpha, a, b, beta, c);
}

void gemm_blas(bool transpose_a, bool transpose_b, std::size_t m, std::size_t n, std::size_t k, float alpha,
               const float* a, const float* b, float beta, float* c) {
  if (m == 0 || n == 0) return;
  const int lda = static_cast<int>(transpose_a ? m : k);
  const int ldb = static_cast<int>(transpose_b ? k : n);
  cblas_sgemm(CblasRowMajor, transpose_a ? CblasTrans : CblasNoTrans, transpose_b ? CblasTrans : CblasNoTrans,
              static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), alpha, a, lda, b, ldb, beta, c,
              static_cast<int>(n));
}

void matmul(const tensor& a, bool transpose_a, const tensor& b, bool transpose_b, tensor& out,
            bool accumulate) {
  const std::size_t m = transpose_a ? cols(a) : rows(a);
  const std::size_t k = transpose_a ? rows(a) : cols(a);
  const std::size_t kb = transpose_b ? cols(b) : rows(b);
  const std::size_t n = transpose_b ? rows(b) : cols(b);
  if (k != kb)
    throw std::invalid_argument("matmul: inner dimensions differ: " + shape_string(a) +
                                (transpose_a ? "^T" : "") + " @ " + shape_string(b) + (transpose_b ? "^T" : ""));
  if (accumulate) {
    if (rows(out) != m || cols(out) != n)
      throw std::invalid_argument("matmul: accumulating into " + shape_string(out) + ", product is (" +
                                  std::to_string(m) + ", " + std::to_string(n) + ")");
  } else if (out.dimension() != 2 || out.shape()[0] != m || out.shape()[1] != n) {
    out = tensor::from_shape({m, n});
  }
  gemm(transpose_a, transpose_b, m, n, k, 1.0f, a.data(), b.data(), accumulate ? 1.0f : 0.0f, out.data());
}

void set_blas_threads(int threads) { openblas_set_num_threads(threads); }

}  // namespace ap

// The reference products on xtensor-blas (OpenBLAS sgemm underneath): portable, and the tests' oracle for
// oneDNN. No <cblas.h> here: it clashes with xtensor-blas.
#include <array>

#include <xtensor-blas/xblas.hpp>
#include <xtensor/xadapt.hpp>

#include "tensor/matmul.hpp"
#include "tensor/scratch.hpp"

namespace ap {
namespace {

using matrix_shape = std::array<std::size_t, 2>;

auto view(const float* p, std::size_t rows, std::size_t cols) {
  return xt::adapt(p, rows * cols, xt::no_ownership(), matrix_shape{rows, cols});
}

}  // namespace

void gemm_reference(bool transpose_a, bool transpose_b, std::size_t m, std::size_t n, std::size_t k, float alpha,
                    const float* a, const float* b, float beta, float* c) {
  if (m == 0 || n == 0) return;
  auto out = xt::adapt(c, m * n, xt::no_ownership(), matrix_shape{m, n});
  if (k == 0) {  // BLAS scales C by beta; spelled out so beta == 0 also clears NaN
    for (std::size_t i = 0; i < m * n; ++i) c[i] = beta == 0.0f ? 0.0f : beta * c[i];
    return;
  }
  const auto va = transpose_a ? view(a, k, m) : view(a, m, k);  // as stored
  const auto vb = transpose_b ? view(b, n, k) : view(b, k, n);
  xt::blas::gemm(va, vb, out, transpose_a, transpose_b, alpha, beta);
}

void gemm_reference(bool transpose_a, bool transpose_b, std::size_t m, std::size_t n, std::size_t k, float alpha,
                    const bfloat16* a, const bfloat16* b, float beta, float* c) {
  const auto wide = widen_operands(a, m * k, b, k * n);  // not allocated and zeroed per call (Note [scratch buffers])
  gemm_reference(transpose_a, transpose_b, m, n, k, alpha, wide.a, wide.b, beta, c);
}

}  // namespace ap

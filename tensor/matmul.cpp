#include "tensor/matmul.hpp"

#include <stdexcept>
#include <string>

#include "tensor/compute.hpp"
#include "tensor/elementwise.hpp"
#include "tensor/scratch.hpp"

namespace ap {

void gemm(bool transpose_a, bool transpose_b, std::size_t m, std::size_t n, std::size_t k, float alpha,
          const float* a, const float* b, float beta, float* c) {
  if (current_compute_backend() == compute_backend::onednn)
    gemm_onednn(transpose_a, transpose_b, m, n, k, alpha, a, b, beta, c);
  else
    gemm_reference(transpose_a, transpose_b, m, n, k, alpha, a, b, beta, c);
}

void gemm(bool transpose_a, bool transpose_b, std::size_t m, std::size_t n, std::size_t k, float alpha,
          const bfloat16* a, const bfloat16* b, float beta, float* c) {
  if (current_compute_backend() == compute_backend::onednn)
    gemm_onednn(transpose_a, transpose_b, m, n, k, alpha, a, b, beta, c);
  else
    gemm_reference(transpose_a, transpose_b, m, n, k, alpha, a, b, beta, c);
}

namespace {

// gemm_bias for either element type of A and B.
template <class T>
void bias_and_product(std::size_t m, std::size_t n, std::size_t k, const T* a, const T* b, const float* bias, float* c) {
  if (current_compute_backend() == compute_backend::onednn) return gemm_bias_onednn(m, n, k, a, b, bias, c);
  fill_rows(c, m, bias, n);  // what oneDNN's epilogue computes (Note [bias in the product])
  gemm_reference(false, false, m, n, k, 1.0f, a, b, 1.0f, c);
}

}  // namespace

void gemm_bias(std::size_t m, std::size_t n, std::size_t k, const float* a, const float* b, const float* bias, float* c) {
  bias_and_product(m, n, k, a, b, bias, c);
}

void gemm_bias(std::size_t m, std::size_t n, std::size_t k, const bfloat16* a, const bfloat16* b, const float* bias,
               float* c) {
  bias_and_product(m, n, k, a, b, bias, c);
}

bool bf16_products_widen() {
  return current_compute_backend() == compute_backend::reference || !onednn_avx512();
}

void gemm_widened_b(bool transpose_a, bool transpose_b, std::size_t m, std::size_t n, std::size_t k, float alpha,
                    const bfloat16* a, const float* b, float beta, float* c) {
  if (bf16_products_widen()) {  // what the bf16 overload would do, B already done (Note [widened bf16 operands])
    thread_local scratch_buffer<float> wide_a;  // Note [scratch buffers]
    gemm(transpose_a, transpose_b, m, n, k, alpha, widen_into(wide_a, a, m * k), b, beta, c);
    return;
  }
  thread_local scratch_buffer<bfloat16> narrow_b;
  bfloat16* pb = narrow_b.get(k * n);
  to_bfloat16(b, pb, k * n);  // exact: B holds bf16 values
  gemm(transpose_a, transpose_b, m, n, k, alpha, a, pb, beta, c);
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

}  // namespace ap

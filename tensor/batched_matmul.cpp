#include "tensor/batched_matmul.hpp"

#include "tensor/compute.hpp"
#include "tensor/matmul.hpp"

namespace ap {

void batched_gemm(bool transpose_a, bool transpose_b, std::size_t batch, std::size_t m, std::size_t n,
                  std::size_t k, float alpha, const float* a, const float* b, float beta, float* c) {
  if (current_compute_backend() == compute_backend::onednn)
    batched_gemm_onednn(transpose_a, transpose_b, batch, m, n, k, alpha, a, b, beta, c);
  else
    batched_gemm_reference(transpose_a, transpose_b, batch, m, n, k, alpha, a, b, beta, c);
}

void batched_gemm_reference(bool transpose_a, bool transpose_b, std::size_t batch, std::size_t m, std::size_t n,
                            std::size_t k, float alpha, const float* a, const float* b, float beta, float* c) {
  for (std::size_t i = 0; i < batch; ++i)
    gemm_reference(transpose_a, transpose_b, m, n, k, alpha, a + i * m * k, b + i * k * n, beta, c + i * m * n);
}

void batched_gemm(bool transpose_a, bool transpose_b, std::size_t batch, std::size_t m, std::size_t n,
                  std::size_t k, float alpha, const bfloat16* a, const bfloat16* b, float beta, float* c) {
  if (current_compute_backend() == compute_backend::onednn)
    batched_gemm_onednn(transpose_a, transpose_b, batch, m, n, k, alpha, a, b, beta, c);
  else
    batched_gemm_reference(transpose_a, transpose_b, batch, m, n, k, alpha, a, b, beta, c);
}

void batched_gemm_reference(bool transpose_a, bool transpose_b, std::size_t batch, std::size_t m, std::size_t n,
                            std::size_t k, float alpha, const bfloat16* a, const bfloat16* b, float beta, float* c) {
  for (std::size_t i = 0; i < batch; ++i)
    gemm_reference(transpose_a, transpose_b, m, n, k, alpha, a + i * m * k, b + i * k * n, beta, c + i * m * n);
}

}  // namespace ap

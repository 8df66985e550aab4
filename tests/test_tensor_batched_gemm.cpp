// Batched products (tensor/batched_matmul.hpp): oneDNN's 3-D matmul against the reference loop of sgemm, on
// attention's shapes (scores, weighted values and their gradients), every transpose, alpha and beta; the
// reference against one plain gemm per matrix.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "tensor/batched_matmul.hpp"
#include "tensor/compute.hpp"
#include "tensor/matmul.hpp"

using namespace ap;

namespace {

std::vector<float> values(std::size_t count, std::uint64_t seed) {
  std::vector<float> v(count);
  std::uint64_t x = seed * 0x9E3779B97F4A7C15ull + 7u;
  for (float& f : v) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    f = static_cast<float>(static_cast<double>(x >> 40) / static_cast<double>(1ull << 24) * 2.0 - 1.0);
  }
  return v;
}

double worst_difference(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double e = std::fabs(double(a[i]) - double(b[i]));
    if (!(e <= worst)) worst = std::isnan(e) ? 1e30 : e;
  }
  return worst;
}

}  // namespace

TEST_CASE("batched_gemm: oneDNN equals the reference on attention's shapes, every transpose, alpha and beta") {
  if (!onednn_available()) return;
  struct shape { std::size_t batch, m, n, k; };
  for (const shape s : {shape{16, 8, 8, 4}, shape{6, 128, 128, 32}, shape{6, 128, 32, 128}, shape{3, 5, 7, 9}})
    for (int t = 0; t < 4; ++t)
      for (const float beta : {0.0f, 1.0f})
        for (const float alpha : {1.0f, 0.125f}) {
          const bool ta = t & 1, tb = t & 2;
          INFO("batch ", s.batch, " m ", s.m, " n ", s.n, " k ", s.k, " ta ", ta, " tb ", tb, " alpha ", alpha,
               " beta ", beta);
          const auto a = values(s.batch * s.m * s.k, 1), b = values(s.batch * s.k * s.n, 2);
          auto c_onednn = values(s.batch * s.m * s.n, 3), c_reference = c_onednn;
          batched_gemm_onednn(ta, tb, s.batch, s.m, s.n, s.k, alpha, a.data(), b.data(), beta, c_onednn.data());
          batched_gemm_reference(ta, tb, s.batch, s.m, s.n, s.k, alpha, a.data(), b.data(), beta, c_reference.data());
          CHECK(worst_difference(c_onednn, c_reference) <= 1e-5 * std::sqrt(double(s.k)) * 4);
        }
}

TEST_CASE("batched_gemm_reference: each matrix of the batch is its own product") {
  const std::size_t batch = 3, m = 4, n = 5, k = 6;
  const auto a = values(batch * m * k, 4), b = values(batch * k * n, 5);
  std::vector<float> c(batch * m * n, 0.0f);
  batched_gemm(false, true, batch, m, n, k, 1.0f, a.data(), b.data(), 0.0f, c.data());
  for (std::size_t i = 0; i < batch; ++i) {
    std::vector<float> one(m * n);
    gemm_reference(false, true, m, n, k, 1.0f, a.data() + i * m * k, b.data() + i * k * n, 0.0f, one.data());
    CHECK(worst_difference(std::vector<float>(c.begin() + i * m * n, c.begin() + (i + 1) * m * n), one) <= 1e-5);
  }
}

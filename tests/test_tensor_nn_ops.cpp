// GELU and layer norm on oneDNN against the reference loops (Note [compute backends]), on a single element,
// a lone row, microbatch and batch shapes, widths not a multiple of 16, and inputs far into GELU's tails.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "tensor/compute.hpp"
#include "tensor/nn_ops.hpp"

using namespace ap;

namespace {

std::vector<float> random_values(std::size_t count, std::uint64_t seed, float scale) {
  std::vector<float> v(count);
  std::uint64_t x = seed * 0x9E3779B97F4A7C15ull + 12345u;
  for (float& f : v) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    f = scale * static_cast<float>(static_cast<double>(x >> 40) / static_cast<double>(1ull << 24) * 2.0 - 1.0);
  }
  return v;
}

// Largest |got - want| / (1 + |want|), reported with its index when above tolerance.
void check_close(const std::vector<float>& got, const std::vector<float>& want, double tolerance, const std::string& what) {
  REQUIRE(got.size() == want.size());
  double worst = 0.0;
  std::size_t at = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double e = std::fabs(double(got[i]) - want[i]) / (1.0 + std::fabs(double(want[i])));
    if (!(e <= worst)) worst = std::isnan(e) ? INFINITY : e, at = i;
  }
  INFO(what << ": max relative error " << worst << " at " << at << ", got " << got[at] << " want " << want[at]);
  CHECK(worst <= tolerance);
}

}  // namespace

TEST_CASE("GELU forward and backward on oneDNN match the reference loop") {
  if (!onednn_available()) return;
  for (std::size_t n : {std::size_t{1}, std::size_t{17}, std::size_t{32 * 2048}, std::size_t{256 * 784}}) {
    for (float scale : {1.0f, 4.0f, 12.0f}) {  // 12: deep into both tails, where tanh saturates
      const auto x = random_values(n, n + 1, scale), dy = random_values(n, n + 2, 1.0f);
      std::vector<float> y(n), y_ref(n), dx(n), dx_ref(n);
      gelu_forward_onednn(x.data(), y.data(), n);
      gelu_forward_reference(x.data(), y_ref.data(), n);
      check_close(y, y_ref, 1e-5, "gelu forward n=" + std::to_string(n) + " scale=" + std::to_string(scale));
      gelu_backward_onednn(x.data(), dy.data(), dx.data(), n);
      gelu_backward_reference(x.data(), dy.data(), dx_ref.data(), n);
      check_close(dx, dx_ref, 1e-5, "gelu backward n=" + std::to_string(n) + " scale=" + std::to_string(scale));
    }
  }
}

TEST_CASE("layer norm forward on oneDNN matches the reference loop (y, mean, rstd)") {
  if (!onednn_available()) return;
  const std::size_t shapes[][2] = {{1, 1}, {1, 784}, {32, 2048}, {256, 100}, {7, 33}};
  for (const auto& s : shapes) {
    const std::size_t rows = s[0], cols = s[1];
    // An offset mean and a wide spread: the variance must not cancel.
    auto x = random_values(rows * cols, rows + cols, 3.0f);
    for (float& v : x) v += 10.0f;
    const auto gamma = random_values(cols, 5, 2.0f), beta = random_values(cols, 6, 1.0f);
    std::vector<float> y(rows * cols), y_ref(rows * cols), mean(rows), mean_ref(rows), rstd(rows), rstd_ref(rows);
    layer_norm_forward_onednn(x.data(), gamma.data(), beta.data(), 1e-5f, rows, cols, y.data(), mean.data(), rstd.data());
    layer_norm_forward_reference(x.data(), gamma.data(), beta.data(), 1e-5f, rows, cols, y_ref.data(), mean_ref.data(),
                                 rstd_ref.data());
    const std::string where = "layer norm (" + std::to_string(rows) + ", " + std::to_string(cols) + ")";
    check_close(y, y_ref, 1e-4, where + " y");  // |y| up to ~5: a few float ulps of (x - mean) * rstd * gamma
    check_close(mean, mean_ref, 1e-5, where + " mean");
    check_close(rstd, rstd_ref, 1e-4, where + " rstd");
  }
}

TEST_CASE("the ops follow the backend switch") {
  const auto x = random_values(100, 9, 3.0f);
  std::vector<float> got(100), want(100);
  set_compute_backend(compute_backend::reference);
  gelu_forward(x.data(), got.data(), 100);
  gelu_forward_reference(x.data(), want.data(), 100);
  CHECK(got == want);
  if (onednn_available()) {
    set_compute_backend(compute_backend::onednn);
    gelu_forward(x.data(), got.data(), 100);
    gelu_forward_onednn(x.data(), want.data(), 100);
    CHECK(got == want);
  }
}

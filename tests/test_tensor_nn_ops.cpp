// GELU's vector loops against the scalar std::tanh loops (Note [GELU on vector lanes]) and layer norm on oneDNN
// against its reference loop (Note [compute backends]), on a single element, a lone row, microbatch and batch
// shapes, widths not a multiple of 16, and inputs far into GELU's tails.
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

TEST_CASE("GELU forward and backward on vector lanes match the std::tanh loop, with any thread count's bits") {
  for (std::size_t n : {std::size_t{1}, std::size_t{17}, std::size_t{32 * 2048}, std::size_t{256 * 784}}) {
    for (float scale : {1.0f, 4.0f, 12.0f}) {  // 12: deep into both tails, where tanh saturates
      const auto x = random_values(n, n + 1, scale), dy = random_values(n, n + 2, 1.0f);
      std::vector<float> y(n), y_ref(n), dx(n), dx_ref(n);
      const std::string where = "n=" + std::to_string(n) + " scale=" + std::to_string(scale);
      set_compute_threads(1);
      gelu_forward(x.data(), y.data(), n);
      gelu_forward_reference(x.data(), y_ref.data(), n);
      check_close(y, y_ref, 1e-6, "gelu forward " + where);
      gelu_backward(x.data(), dy.data(), dx.data(), n);
      gelu_backward_reference(x.data(), dy.data(), dx_ref.data(), n);
      check_close(dx, dx_ref, 1e-6, "gelu backward " + where);
      set_compute_threads(2);  // elementwise: each element by the same instructions
      std::vector<float> y2(n), dx2(n);
      gelu_forward(x.data(), y2.data(), n);
      gelu_backward(x.data(), dy.data(), dx2.data(), n);
      CHECK(y2 == y);
      CHECK(dx2 == dx);
    }
  }
  set_compute_threads(1);
}

TEST_CASE("GELU's vector loop against finite differences of itself, near 0 and in both tails") {
  const std::vector<float> x = {-9.0f, -4.0f, -2.5f, -1.0f, -0.3f, -1e-3f, 0.0f, 2e-3f, 0.4f, 1.0f, 2.2f, 5.0f};
  std::vector<float> dx(x.size()), dy(x.size(), 1.0f);
  gelu_backward(x.data(), dy.data(), dx.data(), x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    // Central differences in float: error ~ h^2 times the third derivative, plus an ulp of GELU over h.
    const float h = 1e-2f, lo = x[i] - h, hi = x[i] + h;
    float f_lo = 0.0f, f_hi = 0.0f;
    gelu_forward(&lo, &f_lo, 1);
    gelu_forward(&hi, &f_hi, 1);
    const double numeric = (double(f_hi) - double(f_lo)) / (double(hi) - double(lo));
    INFO("x = " << x[i] << ": analytic " << dx[i] << ", numeric " << numeric);
    CHECK(std::fabs(dx[i] - numeric) <= 2e-4);
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

TEST_CASE("layer norm follows the backend switch") {
  const std::size_t rows = 4, cols = 100;
  const auto x = random_values(rows * cols, 9, 3.0f), gamma = random_values(cols, 10, 1.0f);
  const auto beta = random_values(cols, 11, 1.0f);
  std::vector<float> got(rows * cols), want(rows * cols), mean(rows), rstd(rows);
  set_compute_backend(compute_backend::reference);
  layer_norm_forward(x.data(), gamma.data(), beta.data(), 1e-5f, rows, cols, got.data(), mean.data(), rstd.data());
  layer_norm_forward_reference(x.data(), gamma.data(), beta.data(), 1e-5f, rows, cols, want.data(), mean.data(),
                               rstd.data());
  CHECK(got == want);
  if (onednn_available()) {
    set_compute_backend(compute_backend::onednn);
    layer_norm_forward(x.data(), gamma.data(), beta.data(), 1e-5f, rows, cols, got.data(), mean.data(), rstd.data());
    layer_norm_forward_onednn(x.data(), gamma.data(), beta.data(), 1e-5f, rows, cols, want.data(), mean.data(),
                              rstd.data());
    CHECK(got == want);
  }
}

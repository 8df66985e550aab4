// The compute backends' matrix products (Note [compute backends]): every oneDNN product against the
// xtensor-blas reference, fp32 and bf16, on the shapes training uses (one row, a 32-row microbatch, 256-row
// batches, a GPT block's layer), every transpose, accumulate (beta = 1) and general alpha/beta, k not a multiple
// of 16; the reference itself against a double-precision sum; the backend switch, per-thread compute threads
// (and OpenBLAS's bands of rows where there is no AVX-512: Note [fp32 products on OpenBLAS without AVX-512]) and
// concurrent callers (per-thread primitive caches).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "tensor/compute.hpp"
#include "tensor/matmul.hpp"

using namespace ap;

namespace {

std::vector<float> random_values(std::size_t count, std::uint64_t seed) {
  std::vector<float> v(count);
  std::uint64_t x = seed * 0x9E3779B97F4A7C15ull + 12345u;
  for (float& f : v) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    f = static_cast<float>(static_cast<double>(x >> 40) / static_cast<double>(1ull << 24) * 2.0 - 1.0);
  }
  return v;
}

std::vector<bfloat16> to_bf16(const std::vector<float>& v) {
  std::vector<bfloat16> out(v.size());
  to_bfloat16(v.data(), out.data(), v.size());
  return out;
}

struct problem {
  bool ta = false, tb = false;
  std::size_t m = 0, n = 0, k = 0;
  float alpha = 1.0f, beta = 0.0f;
  std::string text() const {
    return "m=" + std::to_string(m) + " n=" + std::to_string(n) + " k=" + std::to_string(k) + (ta ? " A^T" : "") +
           (tb ? " B^T" : "") + " alpha=" + std::to_string(alpha) + " beta=" + std::to_string(beta);
  }
};

// Largest |got - want| / sqrt(k), printed with where it happened when above `tolerance`.
void check_close(const std::vector<float>& got, const std::vector<float>& want, const problem& p, double tolerance,
                 const std::string& what) {
  REQUIRE(got.size() == want.size());
  double worst = 0.0;
  std::size_t at = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double e = std::fabs(static_cast<double>(got[i]) - want[i]);
    if (!(e <= worst)) {  // also catches NaN
      worst = std::isnan(e) ? std::numeric_limits<double>::infinity() : e;
      at = i;
    }
  }
  const double scaled = worst / std::sqrt(static_cast<double>(std::max<std::size_t>(p.k, 1)));
  INFO(what << " " << p.text() << ": max |error| / sqrt(k) = " << scaled << " at (" << at / p.n << ", "
            << at % p.n << "), got " << got[at] << " want " << want[at]);
  CHECK(scaled <= tolerance);
}

// The shapes: one row, few rows (a microbatch), a batch; k not a multiple of 16; the MLPs' thin output layer;
// the shape of a GPT block's 1024 -> 256 weight gradient (over 300 rows).
std::vector<problem> shapes() {
  std::vector<problem> out;
  const std::size_t mnk[][3] = {{1, 10, 784}, {1, 300, 257},   {32, 512, 784},  {32, 130, 300},   {7, 33, 17},
                                {256, 10, 256}, {256, 256, 512}, {32, 2048, 2048}, {1024, 256, 300}};
  for (const auto& s : mnk)
    for (int t = 0; t < 4; ++t) {
      problem p;
      p.m = s[0], p.n = s[1], p.k = s[2], p.ta = t & 1, p.tb = t & 2;
      out.push_back(p);
    }
  return out;
}

// The alpha/beta pairs: product only, accumulate (the weight gradient), and general values.
const float alpha_beta[][2] = {{1.0f, 0.0f}, {1.0f, 1.0f}, {-1.5f, 0.25f}};

}  // namespace

TEST_CASE("the reference product matches a double-precision sum") {
  for (problem p : {problem{false, false, 5, 7, 33}, problem{true, true, 32, 17, 100}, problem{true, false, 3, 4, 1}}) {
    for (const auto& ab : alpha_beta) {
      p.alpha = ab[0], p.beta = ab[1];
      const auto a = random_values(p.m * p.k, 1), b = random_values(p.k * p.n, 2), c0 = random_values(p.m * p.n, 3);
      std::vector<float> got = c0, want(p.m * p.n);
      gemm_reference(p.ta, p.tb, p.m, p.n, p.k, p.alpha, a.data(), b.data(), p.beta, got.data());
      for (std::size_t i = 0; i < p.m; ++i)
        for (std::size_t j = 0; j < p.n; ++j) {
          double sum = 0.0;
          for (std::size_t kk = 0; kk < p.k; ++kk)
            sum += static_cast<double>(p.ta ? a[kk * p.m + i] : a[i * p.k + kk]) *
                   (p.tb ? b[j * p.k + kk] : b[kk * p.n + j]);
          want[i * p.n + j] = static_cast<float>(p.alpha * sum + static_cast<double>(p.beta) * c0[i * p.n + j]);
        }
      check_close(got, want, p, 1e-6, "reference vs double");
    }
  }
}

// OpenBLAS's own: whether its thread pool runs (Note [OpenBLAS's idle pool] in tensor/compute.cpp).
extern "C" int blas_server_avail __attribute__((weak));  // absent from a serial OpenBLAS

TEST_CASE("OpenBLAS's thread pool is stopped when the library loads and stays stopped through reference products") {
  if (!&blas_server_avail) return;  // no pool to stop
  CHECK(blas_server_avail == 0);
  const problem p{false, false, 256, 256, 256};
  const auto a = random_values(p.m * p.k, 21), b = random_values(p.k * p.n, 22);
  std::vector<float> c(p.m * p.n);
  for (int i = 0; i < 3; ++i) gemm_reference(false, false, p.m, p.n, p.k, 1.0f, a.data(), b.data(), 0.0f, c.data());
  CHECK(blas_server_avail == 0);
  // And through the fast path's products on a team of 2 (OpenBLAS's, in bands, where there is no AVX-512).
  if (!onednn_available()) return;
  set_compute_threads(2);
  for (int i = 0; i < 3; ++i) gemm_onednn(false, false, p.m, p.n, p.k, 1.0f, a.data(), b.data(), 0.0f, c.data());
  set_compute_threads(1);
  CHECK(blas_server_avail == 0);
}

TEST_CASE("oneDNN fp32 products match the reference (every transpose, accumulate, general alpha/beta)") {
  if (!onednn_available()) return;  // a -DAP_COMPUTE=reference build
  std::uint64_t seed = 100;
  for (problem p : shapes())
    for (const auto& ab : alpha_beta) {
      p.alpha = ab[0], p.beta = ab[1];
      const auto a = random_values(p.m * p.k, ++seed), b = random_values(p.k * p.n, ++seed),
                 c0 = random_values(p.m * p.n, ++seed);
      std::vector<float> got = c0, want = c0;
      gemm_onednn(p.ta, p.tb, p.m, p.n, p.k, p.alpha, a.data(), b.data(), p.beta, got.data());
      gemm_reference(p.ta, p.tb, p.m, p.n, p.k, p.alpha, a.data(), b.data(), p.beta, want.data());
      check_close(got, want, p, 1e-5, "oneDNN fp32");
    }
}

TEST_CASE("oneDNN bf16 products match the reference on the same bf16-rounded inputs") {
  if (!onednn_available()) return;
  std::uint64_t seed = 200;
  for (problem p : shapes())
    for (const auto& ab : alpha_beta) {
      p.alpha = ab[0], p.beta = ab[1];
      const auto a = to_bf16(random_values(p.m * p.k, ++seed)), b = to_bf16(random_values(p.k * p.n, ++seed));
      const auto c0 = random_values(p.m * p.n, ++seed);
      std::vector<float> got = c0, want = c0;
      gemm_onednn(p.ta, p.tb, p.m, p.n, p.k, p.alpha, a.data(), b.data(), p.beta, got.data());
      gemm_reference(p.ta, p.tb, p.m, p.n, p.k, p.alpha, a.data(), b.data(), p.beta, want.data());
      // Products of bf16 values are exact in fp32 and both sum in fp32: only the order of the sums differs.
      // The bound leaves room for the bf16 dot-product instruction's own rounding of each pair.
      check_close(got, want, p, 1e-4, "oneDNN bf16");
    }
}

TEST_CASE("a bf16 A times B kept widened gives the bf16 product's bits, on either backend (Note [widened bf16 operands])") {
  std::uint64_t seed = 900;
  for (compute_backend backend : {compute_backend::onednn, compute_backend::reference}) {
    if (backend == compute_backend::onednn && !onednn_available()) continue;
    set_compute_backend(backend);
    // The reference widens every bf16 product; oneDNN does where it has no AVX-512 (else B is narrowed).
    CHECK(bf16_products_widen() == (backend == compute_backend::reference || !onednn_avx512()));
    for (problem p : shapes())
      for (const auto& ab : alpha_beta) {
        p.alpha = ab[0], p.beta = ab[1];
        INFO(compute_backend_name(backend), " ", p.text());
        const auto a = to_bf16(random_values(p.m * p.k, ++seed)), b = to_bf16(random_values(p.k * p.n, ++seed));
        std::vector<float> b_widened(b.size());
        to_float(b.data(), b_widened.data(), b.size());
        const auto c0 = random_values(p.m * p.n, ++seed);
        std::vector<float> got = c0, want = c0;
        gemm_widened_b(p.ta, p.tb, p.m, p.n, p.k, p.alpha, a.data(), b_widened.data(), p.beta, got.data());
        gemm(p.ta, p.tb, p.m, p.n, p.k, p.alpha, a.data(), b.data(), p.beta, want.data());
        CHECK(got == want);
      }
  }
  set_compute_backend(onednn_available() ? compute_backend::onednn : compute_backend::reference);
}

TEST_CASE("bf16 products differ from fp32 ones by the inputs' rounding only") {
  const problem p{false, false, 32, 64, 784};
  const auto a = random_values(p.m * p.k, 7), b = random_values(p.k * p.n, 8);
  std::vector<float> exact(p.m * p.n), rounded(p.m * p.n);
  gemm_reference(false, false, p.m, p.n, p.k, 1.0f, a.data(), b.data(), 0.0f, exact.data());
  gemm(false, false, p.m, p.n, p.k, 1.0f, to_bf16(a).data(), to_bf16(b).data(), 0.0f, rounded.data());
  // Each input carries a relative error up to 2^-9: about 2^-8 * |a||b| per product, random in sign.
  check_close(rounded, exact, p, 1e-2, "bf16 vs fp32");
}

TEST_CASE("beta == 0 overwrites C, NaN included, k == 0 scales C by beta") {
  for (compute_backend backend : {compute_backend::onednn, compute_backend::reference}) {
    if (backend == compute_backend::onednn && !onednn_available()) continue;
    INFO(compute_backend_name(backend));
    set_compute_backend(backend);
    const auto a = random_values(4 * 20, 1), b = random_values(20 * 6, 2);
    std::vector<float> c(4 * 6, std::numeric_limits<float>::quiet_NaN());
    gemm(false, false, 4, 6, 20, 1.0f, a.data(), b.data(), 0.0f, c.data());
    for (float v : c) CHECK(std::isfinite(v));
    // The same with A transposed (a weight gradient's product).
    const auto at = random_values(20 * 512, 3);
    std::vector<float> wide(512 * 6, std::numeric_limits<float>::quiet_NaN());
    gemm(true, false, 512, 6, 20, 1.0f, at.data(), b.data(), 0.0f, wide.data());
    for (float v : wide) CHECK(std::isfinite(v));
    std::vector<float> d(4 * 6, 2.0f);
    gemm(false, false, 4, 6, 0, 1.0f, a.data(), b.data(), 0.5f, d.data());
    for (float v : d) CHECK(v == 1.0f);
  }
  set_compute_backend(onednn_available() ? compute_backend::onednn : compute_backend::reference);
}

TEST_CASE("the backend switch routes ap::gemm and matmul, and names its errors") {
  const std::size_t m = 32, k = 300, n = 130;
  const std::vector<float> av = random_values(m * k, 11), bv = random_values(k * n, 12);
  for (compute_backend backend : {compute_backend::reference, compute_backend::onednn}) {
    if (backend == compute_backend::onednn && !onednn_available()) {
      CHECK_THROWS_AS(set_compute_backend(backend), std::invalid_argument);
      continue;
    }
    set_compute_backend(backend);
    CHECK(current_compute_backend() == backend);
    std::vector<float> via_gemm(m * n), direct(m * n);
    gemm(false, false, m, n, k, 1.0f, av.data(), bv.data(), 0.0f, via_gemm.data());
    if (backend == compute_backend::onednn)
      gemm_onednn(false, false, m, n, k, 1.0f, av.data(), bv.data(), 0.0f, direct.data());
    else
      gemm_reference(false, false, m, n, k, 1.0f, av.data(), bv.data(), 0.0f, direct.data());
    CHECK(via_gemm == direct);  // the same code path: bit for bit
    tensor out;
    matmul(from_values({m, k}, av), false, from_values({k, n}, bv), false, out);
    CHECK(std::equal(out.begin(), out.end(), direct.begin()));
  }
  set_compute_backend(onednn_available() ? compute_backend::onednn : compute_backend::reference);
  CHECK(parse_compute_backend("reference") == compute_backend::reference);
  CHECK_THROWS_WITH_AS(parse_compute_backend("mkl"), "compute backend 'mkl': expected onednn or reference",
                       std::invalid_argument);
}

TEST_CASE("matmul on tensors: accumulate adds, shapes are checked") {
  const std::size_t m = 32, k = 300, n = 130;
  const std::vector<float> av = random_values(m * k, 11), btv = random_values(n * k, 13);
  const tensor a = from_values({m, k}, av), bt = from_values({n, k}, btv);
  tensor out;
  matmul(a, false, bt, true, out);
  std::vector<float> want(m * n);
  gemm_reference(false, true, m, n, k, 1.0f, av.data(), btv.data(), 0.0f, want.data());
  CHECK(max_relative_difference(out, from_values({m, n}, want)) < 1e-5f);
  matmul(a, false, bt, true, out, true);  // out += a bt^T
  gemm_reference(false, true, m, n, k, 1.0f, av.data(), btv.data(), 1.0f, want.data());
  // Two sums of k products each, in orders that differ by kernel (oneDNN's blocking vs the reference's loop):
  // float rounding can reach 2k units of 6e-8, 3.6e-5 relative; measured up to 1.03e-5 on a Zen 3 core.
  CHECK(max_relative_difference(out, from_values({m, n}, want)) < 4e-5f);
  CHECK_THROWS_WITH_AS(matmul(a, false, bt, false, out), "matmul: inner dimensions differ: (32, 300) @ (130, 300)",
                       std::invalid_argument);
}

TEST_CASE("compute threads are set per calling thread") {
  set_compute_threads(1);
  CHECK(compute_threads() == 1);
  int other = 0;
  std::thread t([&] {
    set_compute_threads(2);
    other = compute_threads();
  });
  t.join();
  CHECK(other == 2);
  CHECK(compute_threads() == 1);  // the other thread's setting is its own
  CHECK_THROWS_AS(set_compute_threads(0), std::invalid_argument);
}

TEST_CASE("one and two compute threads give the same products") {
  if (!onednn_available()) return;
  // Without AVX-512 the last is cut into bands of columns (32 rows: Note [fp32 products on OpenBLAS without
  // AVX-512]), the others into bands of rows.
  for (const problem p : {problem{true, false, 256, 512, 256}, problem{true, false, 1024, 256, 600, 1.0f, 1.0f},
                          problem{false, true, 1000, 300, 200, -0.5f, 0.25f}, problem{false, false, 32, 2048, 784}}) {
    const auto a = random_values(p.m * p.k, 5), b = random_values(p.k * p.n, 6), c0 = random_values(p.m * p.n, 7);
    std::vector<float> one = c0, two = c0;
    set_compute_threads(1);
    gemm_onednn(p.ta, p.tb, p.m, p.n, p.k, p.alpha, a.data(), b.data(), p.beta, one.data());
    set_compute_threads(2);
    gemm_onednn(p.ta, p.tb, p.m, p.n, p.k, p.alpha, a.data(), b.data(), p.beta, two.data());
    set_compute_threads(1);
    check_close(two, one, p, 1e-5, "2 threads vs 1");
    // Without AVX-512: OpenBLAS in bands cut at multiples of 24 rows, the bits of one call (Note [fp32 products
    // on OpenBLAS without AVX-512]).
    if (!onednn_avx512() && p.m >= 2 * 24) CHECK(two == one);
    // And against the reference: bands of columns put each column of C where it belongs.
    std::vector<float> want = c0;
    gemm_reference(p.ta, p.tb, p.m, p.n, p.k, p.alpha, a.data(), b.data(), p.beta, want.data());
    check_close(two, want, p, 1e-5, "2 threads vs the reference");
  }
}

TEST_CASE("concurrent callers get correct results (per-thread primitive caches and streams)") {
  if (!onednn_available()) return;
  auto worker = [](std::size_t m, std::uint64_t seed, bool bf16, double* worst) {
    set_compute_threads(1);
    const std::size_t n = 300, k = 500;
    const std::vector<float> a = random_values(m * k, seed), b = random_values(n * k, seed + 1);
    const auto a16 = to_bf16(a), b16 = to_bf16(b);
    std::vector<float> want(m * n), got(m * n);
    if (bf16)
      gemm_reference(false, true, m, n, k, 1.0f, a16.data(), b16.data(), 0.0f, want.data());
    else
      gemm_reference(false, true, m, n, k, 1.0f, a.data(), b.data(), 0.0f, want.data());
    *worst = 0.0;
    for (int rep = 0; rep < 20; ++rep) {
      std::vector<float> fresh(m * n, 1.0f);  // a new buffer each time: the cached primitive is re-pointed
      if (bf16)
        gemm_onednn(false, true, m, n, k, 1.0f, a16.data(), b16.data(), 0.0f, fresh.data());
      else
        gemm_onednn(false, true, m, n, k, 1.0f, a.data(), b.data(), 0.0f, fresh.data());
      for (std::size_t i = 0; i < m * n; ++i) *worst = std::max(*worst, double(std::fabs(fresh[i] - want[i])));
    }
  };
  double w1 = 1, w2 = 1;
  std::thread t1(worker, 17, 21, false, &w1), t2(worker, 48, 31, true, &w2);
  t1.join();
  t2.join();
  CHECK(w1 < 1e-5 * std::sqrt(500.0));
  CHECK(w2 < 1e-4 * std::sqrt(500.0));
}

// The small-M GEMM kernels (tensor/small_gemm) and ap::gemm's dispatch against a double-precision reference:
// every edge of the register tiles (rows not a multiple of 6, columns not a multiple of 16 or 64, k not a
// multiple of 16), alpha/beta semantics (beta == 0 never reads C), leading dimensions, more than 64 rows,
// and concurrent callers (per-thread packing buffers).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "tensor/matmul.hpp"
#include "tensor/small_gemm.hpp"

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

struct problem {
  bool ta = false, tb = false;
  std::size_t m = 0, n = 0, k = 0;
  std::size_t lda = 0, ldb = 0, ldc = 0;  // 0: packed (the natural leading dimension)
  float alpha = 1.0f, beta = 0.0f;
};

// Checks C against alpha * op(A) op(B) + beta * C0 in double, with an error bound that grows with k:
// |error| <= 1e-6 * (k + 4) * (|alpha| * sum |a||b| + |beta c0|) (float rounding is at most ~6e-8 * k of it).
// Elements outside the m x n window (ldc > n) must be untouched.
void check(const problem& p, const std::vector<float>& a, const std::vector<float>& b, const std::vector<float>& c0,
           const std::vector<float>& c, const std::string& what) {
  const std::size_t lda = p.lda ? p.lda : (p.ta ? p.m : p.k);
  const std::size_t ldb = p.ldb ? p.ldb : (p.tb ? p.k : p.n);
  const std::size_t ldc = p.ldc ? p.ldc : p.n;
  std::size_t bad = 0;
  double worst = 0.0;
  for (std::size_t i = 0; i < p.m; ++i) {
    for (std::size_t j = 0; j < p.n; ++j) {
      double sum = 0.0, mag = 0.0;
      for (std::size_t kk = 0; kk < p.k; ++kk) {
        const double av = p.ta ? a[kk * lda + i] : a[i * lda + kk];
        const double bv = p.tb ? b[j * ldb + kk] : b[kk * ldb + j];
        sum += av * bv;
        mag += std::fabs(av * bv);
      }
      double want = p.alpha * sum;
      double scale = std::fabs(p.alpha) * mag;
      if (p.beta != 0.0f) {
        want += static_cast<double>(p.beta) * c0[i * ldc + j];
        scale += std::fabs(static_cast<double>(p.beta) * c0[i * ldc + j]);
      }
      const double got = c[i * ldc + j];
      const double err = std::fabs(got - want);
      const double tol = 1e-6 * static_cast<double>(p.k + 4) * std::max(scale, 1e-30);
      if (!(err <= tol)) ++bad;  // also catches NaN
      if (scale > 0) worst = std::max(worst, err / scale);
    }
    for (std::size_t j = p.n; j < ldc; ++j)
      if (!(c[i * ldc + j] == c0[i * ldc + j] || (std::isnan(c[i * ldc + j]) && std::isnan(c0[i * ldc + j]))))
        ++bad;
  }
  INFO(what << ": " << (p.ta ? "A^T " : "A ") << (p.tb ? "B^T " : "B ") << "m=" << p.m << " n=" << p.n
            << " k=" << p.k << " alpha=" << p.alpha << " beta=" << p.beta << " worst relative error " << worst);
  CHECK(bad == 0);
}

enum class route { small, blas, dispatch };

void run_and_check(const problem& p, route r, std::uint64_t seed) {
  const std::size_t lda = p.lda ? p.lda : (p.ta ? p.m : p.k);
  const std::size_t ldb = p.ldb ? p.ldb : (p.tb ? p.k : p.n);
  const std::size_t ldc = p.ldc ? p.ldc : p.n;
  const std::vector<float> a = random_values((p.ta ? p.k : p.m) * lda, seed);
  const std::vector<float> b = random_values((p.tb ? p.n : p.k) * ldb, seed + 1);
  std::vector<float> c0 = random_values(p.m * ldc, seed + 2);
  // With beta == 0, C may hold anything, NaN included: it must be overwritten, never read.
  if (p.beta == 0.0f)
    for (std::size_t i = 0; i < p.m; ++i)
      for (std::size_t j = 0; j < p.n; ++j) c0[i * ldc + j] = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> c = c0;
  switch (r) {
    case route::small:
      if (p.tb)
        small_gemm_nt(p.m, p.n, p.k, p.alpha, a.data(), lda, b.data(), ldb, p.beta, c.data(), ldc);
      else
        small_gemm_nn(p.m, p.n, p.k, p.alpha, a.data(), lda, b.data(), ldb, p.beta, c.data(), ldc);
      break;
    case route::blas:
      gemm_blas(p.ta, p.tb, p.m, p.n, p.k, p.alpha, a.data(), b.data(), p.beta, c.data());
      break;
    case route::dispatch:
      gemm(p.ta, p.tb, p.m, p.n, p.k, p.alpha, a.data(), b.data(), p.beta, c.data());
      break;
  }
  check(p, a, b, c0, c, r == route::small ? "small_gemm" : r == route::blas ? "gemm_blas" : "gemm");
}

const std::vector<std::size_t> edge_rows = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 31, 32, 33, 64};
const std::vector<std::size_t> edge_sizes = {1, 15, 16, 17, 63, 64, 65, 200};
const float alphas_betas[][2] = {{1.0f, 0.0f}, {1.0f, 1.0f}, {-1.5f, 0.5f}};

void edge_grid(bool transpose_b) {
  std::uint64_t seed = transpose_b ? 1000 : 1;
  for (std::size_t m : edge_rows)
    for (std::size_t n : edge_sizes)
      for (std::size_t k : edge_sizes) {
        // Each shape with one alpha/beta pair in turn, and beta 0 and 1 with alpha 1 on the small rows.
        const auto& ab = alphas_betas[(m + n + k) % 3];
        problem p;
        p.tb = transpose_b;
        p.m = m;
        p.n = n;
        p.k = k;
        p.alpha = ab[0];
        p.beta = ab[1];
        run_and_check(p, route::small, ++seed);
        if (m <= 8) {
          p.alpha = 1.0f;
          p.beta = ab[1] == 0.0f ? 1.0f : 0.0f;
          run_and_check(p, route::small, ++seed);
        }
      }
}

}  // namespace

TEST_CASE("small_gemm_nn matches the reference on every tile edge") { edge_grid(false); }

TEST_CASE("small_gemm_nt matches the reference on every tile edge") { edge_grid(true); }

TEST_CASE("small GEMMs match the reference at pipeline sizes (k or n = 2048)") {
  std::uint64_t seed = 5000;
  for (bool tb : {false, true})
    for (std::size_t m : {1, 7, 32, 33})
      for (auto kn : {std::pair<std::size_t, std::size_t>{2048, 65}, {65, 2048}, {784, 200}, {2048, 2048}}) {
        const bool big = kn.first == 2048 && kn.second == 2048;
        if (big && m == 33) continue;  // keep the double-precision reference cheap
        for (const auto& ab : alphas_betas) {
          if (big && m == 32 && ab[1] != 0.5f) continue;
          problem p;
          p.tb = tb;
          p.m = m;
          p.k = kn.first;
          p.n = kn.second;
          p.alpha = ab[0];
          p.beta = ab[1];
          run_and_check(p, route::small, ++seed);
        }
      }
}

TEST_CASE("small GEMMs honour leading dimensions and leave the rest of C alone") {
  std::uint64_t seed = 7000;
  for (bool tb : {false, true})
    for (std::size_t m : {3, 13, 40})
      for (std::size_t n : {17, 100})
        for (std::size_t k : {15, 70}) {
          problem p;
          p.tb = tb;
          p.m = m;
          p.n = n;
          p.k = k;
          p.lda = k + 5;
          p.ldb = (tb ? k : n) + 3;
          p.ldc = n + 9;
          p.alpha = 0.75f;
          p.beta = (m + n) % 2 ? 1.0f : 0.0f;
          run_and_check(p, route::small, ++seed);
        }
}

TEST_CASE("small_gemm_nn with B, A and C at every offset within a cache line") {
  // The nn kernel aligns its column panels to B's cache lines when every row of B starts at the same
  // offset (ldb a multiple of 16), masking the columns before the matrix: try all 16 offsets.
  for (std::size_t n : {16, 32, 48, 80, 128, 200})
    for (std::size_t shift = 0; shift < 16; ++shift)
      for (std::size_t m : {1, 7, 32}) {
        const std::size_t k = 37 + shift;
        std::vector<float> a_buf = random_values(m * k + 16, shift), b_buf = random_values(k * n + 16, shift + 1),
                           c_buf = random_values(m * n + 16, shift + 2);
        const float* a = a_buf.data() + (15 - shift);
        const float* b = b_buf.data() + shift;
        float* c = c_buf.data() + (shift * 7) % 16;
        const std::vector<float> c0(c, c + m * n);
        const std::vector<float> c_before = c_buf;
        small_gemm_nn(m, n, k, 1.25f, a, k, b, n, 1.0f, c, n);
        std::size_t bad = 0;
        for (std::size_t i = 0; i < m; ++i)
          for (std::size_t j = 0; j < n; ++j) {
            double sum = 0.0, mag = 0.0;
            for (std::size_t kk = 0; kk < k; ++kk) {
              sum += static_cast<double>(a[i * k + kk]) * b[kk * n + j];
              mag += std::fabs(static_cast<double>(a[i * k + kk]) * b[kk * n + j]);
            }
            const double want = 1.25 * sum + c0[i * n + j];
            if (!(std::fabs(c[i * n + j] - want) <= 1e-6 * (k + 4) * (1.25 * mag + std::fabs(c0[i * n + j])))) ++bad;
          }
        // Nothing outside C's m x n elements changes (the masked head may point before C).
        const std::size_t c_begin = static_cast<std::size_t>(c - c_buf.data());
        for (std::size_t x = 0; x < c_buf.size(); ++x)
          if ((x < c_begin || x >= c_begin + m * n) && c_buf[x] != c_before[x]) ++bad;
        INFO("n=" << n << " B offset " << shift << " floats, m=" << m);
        CHECK(bad == 0);
      }
}

TEST_CASE("small_gemm_nt with more rows than one packed panel (m > 64)") {
  std::uint64_t seed = 8000;
  for (std::size_t m : {65, 100, 130})
    for (float beta : {0.0f, 1.0f}) {
      problem p;
      p.tb = true;
      p.m = m;
      p.n = 70;
      p.k = 90;
      p.alpha = 2.0f;
      p.beta = beta;
      run_and_check(p, route::small, ++seed);
      p.tb = false;
      run_and_check(p, route::small, ++seed);
    }
}

TEST_CASE("small GEMMs with k == 0 or alpha == 0 scale C by beta") {
  for (bool tb : {false, true})
    for (float beta : {0.0f, 1.0f, 0.5f}) {
      problem p;
      p.tb = tb;
      p.m = 5;
      p.n = 33;
      p.k = 0;
      p.beta = beta;
      run_and_check(p, route::small, 9000);
      p.k = 20;
      p.alpha = 0.0f;
      run_and_check(p, route::small, 9001);
    }
}

TEST_CASE("ap::gemm dispatch: every transpose combination agrees with the reference and with OpenBLAS") {
  std::uint64_t seed = 10000;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (std::size_t m : {1, 8, 32, 64, 65, 200})
        for (auto kn : {std::pair<std::size_t, std::size_t>{300, 257}, {2048, 64}, {10, 2048}, {33, 9}}) {
          for (route r : {route::dispatch, route::blas}) {
            problem p;
            p.ta = ta;
            p.tb = tb;
            p.m = m;
            p.k = kn.first;
            p.n = kn.second;
            p.alpha = 1.0f;
            p.beta = (m % 2) ? 1.0f : 0.0f;
            run_and_check(p, r, ++seed);
          }
        }
}

TEST_CASE("ap::gemm dispatch above 64 rows (deep k: the small kernels, nt in 64-row slices)") {
  std::uint64_t seed = 11000;
  for (bool tb : {false, true})
    for (std::size_t m : {65, 100}) {
      problem p;
      p.tb = tb;
      p.m = m;
      p.k = 1100;
      p.n = 520;
      p.alpha = 1.0f;
      p.beta = tb ? 0.0f : 1.0f;
      CHECK(small_gemm_preferred(false, tb, m, p.n, p.k) == small_gemm_compiled());
      run_and_check(p, route::dispatch, ++seed);
    }
}

TEST_CASE("ap::gemm routes only untransposed-A, few-row products to the small kernels") {
  if (!small_gemm_compiled()) {
    CHECK_FALSE(small_gemm_preferred(false, false, 32, 2048, 2048));
    return;
  }
  CHECK(small_gemm_preferred(false, false, 32, 2048, 2048));
  CHECK(small_gemm_preferred(false, true, 32, 2048, 2048));
  CHECK_FALSE(small_gemm_preferred(true, false, 32, 2048, 2048));  // the weight gradient stays on OpenBLAS
  CHECK_FALSE(small_gemm_preferred(true, true, 32, 2048, 2048));
  CHECK(small_gemm_preferred(false, false, 8, 2048, 784));
  CHECK(small_gemm_preferred(false, true, 64, 784, 2048));
  CHECK_FALSE(small_gemm_preferred(false, false, 256, 2048, 2048));  // many rows: OpenBLAS
  CHECK_FALSE(small_gemm_preferred(false, true, 256, 2048, 2048));
  CHECK_FALSE(small_gemm_preferred(false, false, 32, 10, 2048));  // narrow or shallow: OpenBLAS
  CHECK_FALSE(small_gemm_preferred(false, true, 32, 2048, 10));
}

TEST_CASE("matmul on tensors goes through the dispatch, with and without accumulate") {
  const std::size_t m = 32, k = 300, n = 130;
  const std::vector<float> av = random_values(m * k, 11), bv = random_values(k * n, 12), btv = random_values(n * k, 13);
  const tensor a = from_values({m, k}, av), b = from_values({k, n}, bv), bt = from_values({n, k}, btv);
  tensor out;
  matmul(a, false, b, false, out);
  std::vector<float> want(m * n);
  gemm_blas(false, false, m, n, k, 1.0f, av.data(), bv.data(), 0.0f, want.data());
  CHECK(max_relative_difference(out, from_values({m, n}, want)) < 1e-5f);
  matmul(a, false, bt, true, out, true);  // out += a bt^T
  gemm_blas(false, true, m, n, k, 1.0f, av.data(), btv.data(), 1.0f, want.data());
  CHECK(max_relative_difference(out, from_values({m, n}, want)) < 1e-5f);
}

TEST_CASE("concurrent callers get correct results (per-thread packing buffers)") {
  auto worker = [](std::size_t m, std::uint64_t seed, bool* ok) {
    const std::size_t n = 300, k = 500;
    const std::vector<float> a = random_values(m * k, seed), b = random_values(n * k, seed + 1);
    std::vector<float> want(m * n), got(m * n);
    gemm_blas(false, true, m, n, k, 1.0f, a.data(), b.data(), 0.0f, want.data());
    *ok = true;
    for (int rep = 0; rep < 20; ++rep) {
      small_gemm_nt(m, n, k, 1.0f, a.data(), k, b.data(), k, 0.0f, got.data(), n);
      for (std::size_t i = 0; i < m * n; ++i)
        if (std::fabs(got[i] - want[i]) > 1e-4f * (1.0f + std::fabs(want[i]))) *ok = false;
    }
  };
  bool ok1 = false, ok2 = false;
  std::thread t1(worker, 17, 21, &ok1), t2(worker, 48, 31, &ok2);
  t1.join();
  t2.join();
  CHECK(ok1);
  CHECK(ok2);
}

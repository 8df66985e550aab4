// AVX-512 kernels for few-row GEMMs (see small_gemm.hpp). Kept apart from xtensor-blas (<cblas.h> clash).
//
// nn, C = A B with B (k, n): register tile of up to 6 rows of A x 64 columns of B (4 zmm) = 24 accumulators;
// per k it broadcasts A[i][k] and loads the 64-float segment of B's row k. B is walked in panels of
// nn_kc rows x 64 columns (32 KB: stays in L1 while every row block of A passes over it), straight from
// B's own storage: no packed copy. While the first row block runs over a panel it prefetches the next
// panel, whose rows lie a whole row of B (8 KB for n = 2048) apart, where the hardware prefetcher would not
// follow. Rows of A are split into balanced blocks of at most 6 (32 = 6+6+5+5+5+5, not 6*5+2), columns
// past a multiple of 16 use masked loads and stores.
//
// nt, C = A B^T with B stored (n, k): computed as C^T = B A^T. A^T (k x m, m padded to 16) is the small
// operand and is packed once per call (m*k floats, e.g. 256 KB for 32 x 2048, in L2); B is streamed once,
// row by row, sequentially (the hardware prefetcher follows up to a dozen such streams). Register tile:
// nt_jr rows of B x up to 4 zmm of A^T columns (<= 24 accumulators); per k it loads the A^T segment and
// broadcasts B[j][k]. The finished tile is C^T: it is written transposed into C, once per tile (full k in
// registers, no horizontal sums).
#include "tensor/small_gemm.hpp"

#include <cblas.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <utility>
#include <vector>

#if defined(__AVX512F__)
#include <immintrin.h>
#define AP_SMALL_GEMM_AVX512 1
#else
#define AP_SMALL_GEMM_AVX512 0
#endif

namespace ap {

namespace {

void blas_fallback(bool transpose_b, std::size_t m, std::size_t n, std::size_t k, float alpha, const float* a,
                   std::size_t lda, const float* b, std::size_t ldb, float beta, float* c, std::size_t ldc) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, transpose_b ? CblasTrans : CblasNoTrans, static_cast<int>(m),
              static_cast<int>(n), static_cast<int>(k), alpha, a, static_cast<int>(lda), b, static_cast<int>(ldb),
              beta, c, static_cast<int>(ldc));
}

#if AP_SMALL_GEMM_AVX512

// C = beta * C (k == 0 or alpha == 0): BLAS semantics, beta == 0 writes zeros without reading C.
void scale_c(std::size_t m, std::size_t n, float beta, float* c, std::size_t ldc) {
  if (beta == 1.0f) return;
  for (std::size_t i = 0; i < m; ++i) {
    float* ci = c + i * ldc;
    if (beta == 0.0f)
      std::fill(ci, ci + n, 0.0f);
    else
      for (std::size_t j = 0; j < n; ++j) ci[j] *= beta;
  }
}

long tunable(const char* name, long fallback) {
  const char* v = std::getenv(name);
  return v ? std::max(1L, std::strtol(v, nullptr, 10)) : fallback;
}

// ---------------------------------------------------------------------------------------------------- nn

constexpr int nn_mr = 6;   // rows of A per register tile
constexpr int nn_nv = 4;   // zmm (16 columns each) per register tile: 64 columns
const std::size_t nn_kc = static_cast<std::size_t>(tunable("AP_SMALL_GEMM_KC", 128));  // rows of a B panel

// One register tile: C[0:MR, 0:16*NV) (+)= alpha * A[0:MR, 0:kc) * B[0:kc, 0:16*NV). The last zmm column
// is masked with `last`. `first`: this is the first k panel, so beta applies (and beta == 0 skips reading
// C); later panels add. With PF, prefetch row k of the next panel (pf) while reading row k of this one.
template <int MR, int NV, bool PF>
void nn_tile(std::size_t kc, const float* a, std::size_t lda, const float* b, std::size_t ldb, float* c,
             std::size_t ldc, float alpha, float beta, bool first, __mmask16 last, const float* pf) {
  __m512 acc[MR][NV];
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_ps();
  const float* ar[MR];
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) ar[r] = a + r * lda;
  for (std::size_t k = 0; k < kc; ++k) {
    const float* bk = b + k * ldb;
    __m512 bv[NV];
#pragma GCC unroll 8
    for (int v = 0; v < NV - 1; ++v) bv[v] = _mm512_loadu_ps(bk + 16 * v);
    bv[NV - 1] = _mm512_maskz_loadu_ps(last, bk + 16 * (NV - 1));
    if (PF) {
      const char* p = reinterpret_cast<const char*>(pf + k * ldb);
#pragma GCC unroll 8
      for (int v = 0; v < nn_nv; ++v) _mm_prefetch(p + 64 * v, _MM_HINT_T0);
    }
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
      const __m512 av = _mm512_set1_ps(ar[r][k]);
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_fmadd_ps(av, bv[v], acc[r][v]);
    }
  }
  const __m512 va = _mm512_set1_ps(alpha);
  const bool overwrite = first && beta == 0.0f;
  const __m512 vb = _mm512_set1_ps(first ? beta : 1.0f);
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) {
    float* cr = c + r * ldc;
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) {
      const __mmask16 mask = v == NV - 1 ? last : static_cast<__mmask16>(0xFFFF);
      __m512 out;
      if (overwrite) {
        out = _mm512_mul_ps(acc[r][v], va);
      } else {
        const __m512 old = _mm512_maskz_loadu_ps(mask, cr + 16 * v);
        out = _mm512_fmadd_ps(acc[r][v], va, _mm512_mul_ps(old, vb));
      }
      _mm512_mask_storeu_ps(cr + 16 * v, mask, out);
    }
  }
}

using nn_fn = void (*)(std::size_t, const float*, std::size_t, const float*, std::size_t, float*, std::size_t,
                       float, float, bool, __mmask16, const float*);

template <int MR, int... V>
constexpr std::array<nn_fn, 2 * sizeof...(V)> nn_row(std::integer_sequence<int, V...>) {
  return {&nn_tile<MR, V + 1, false>..., &nn_tile<MR, V + 1, true>...};
}

template <int... R>
constexpr std::array<std::array<nn_fn, 2 * nn_nv>, sizeof...(R)> nn_table(std::integer_sequence<int, R...>) {
  return {nn_row<R + 1>(std::make_integer_sequence<int, nn_nv>())...};
}

// nn_tiles[mr - 1][(pf ? nn_nv : 0) + nv - 1]
constexpr auto nn_tiles = nn_table(std::make_integer_sequence<int, nn_mr>());

void nn_avx512(std::size_t m, std::size_t n, std::size_t k, float alpha, const float* a, std::size_t lda,
               const float* b, std::size_t ldb, float beta, float* c, std::size_t ldc) {
  constexpr std::size_t panel = 16 * nn_nv;
  const std::size_t blocks = (m + nn_mr - 1) / nn_mr;
  const std::size_t base = m / blocks, extra = m % blocks;  // the first `extra` blocks get one more row
  for (std::size_t k0 = 0; k0 < k; k0 += nn_kc) {
    const std::size_t kc = std::min(nn_kc, k - k0);
    const bool first = k0 == 0;
    for (std::size_t j0 = 0; j0 < n; j0 += panel) {
      const std::size_t width = std::min(panel, n - j0);
      const std::size_t nv = (width + 15) / 16;
      const __mmask16 last = static_cast<__mmask16>((1u << (width - 16 * (nv - 1))) - 1u);
      const float* bp = b + k0 * ldb + j0;
      const float* next = j0 + panel < n ? bp + panel : k0 + nn_kc < k ? b + (k0 + nn_kc) * ldb : nullptr;
      std::size_t i0 = 0;
      for (std::size_t blk = 0; blk < blocks; ++blk) {
        const std::size_t mr = base + (blk < extra ? 1 : 0);
        const bool pf = blk == 0 && next != nullptr;
        nn_tiles[mr - 1][(pf ? nn_nv : 0) + nv - 1](kc, a + i0 * lda + k0, lda, bp, ldb, c + i0 * ldc + j0, ldc,
                                                    alpha, beta, first, last, next);
        i0 += mr;
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------------- nt

constexpr int nt_mv_max = 4;  // zmm of A^T columns: m <= 64
constexpr int nt_jr_max = 16;
// Rows of B per register tile for each number of zmm: at most 24 accumulators, and not more B row
// streams than general registers allow.
const int nt_jr[nt_mv_max] = {static_cast<int>(std::min(16L, tunable("AP_SMALL_GEMM_JR1", 12))),
                              static_cast<int>(std::min(16L, tunable("AP_SMALL_GEMM_JR2", 12))),
                              static_cast<int>(std::min(16L, tunable("AP_SMALL_GEMM_JR3", 8))),
                              static_cast<int>(std::min(16L, tunable("AP_SMALL_GEMM_JR4", 6)))};

// C[0:m, 0:JR) (+)= alpha * (B[0:JR, 0:k) * AT[0:k, 0:m))^T, AT packed with 16*MV floats per k.
template <int JR, int MV>
void nt_tile(std::size_t k, const float* at, const float* b, std::size_t ldb, float* c, std::size_t ldc,
             std::size_t m, float alpha, float beta) {
  constexpr int mp = 16 * MV;
  __m512 acc[JR][MV];
#pragma GCC unroll 16
  for (int j = 0; j < JR; ++j)
#pragma GCC unroll 4
    for (int v = 0; v < MV; ++v) acc[j][v] = _mm512_setzero_ps();
  const float* br[JR];
#pragma GCC unroll 16
  for (int j = 0; j < JR; ++j) br[j] = b + j * ldb;
  for (std::size_t kk = 0; kk < k; ++kk) {
    __m512 av[MV];
#pragma GCC unroll 4
    for (int v = 0; v < MV; ++v) av[v] = _mm512_loadu_ps(at + kk * mp + 16 * v);
#pragma GCC unroll 16
    for (int j = 0; j < JR; ++j) {
      const __m512 bb = _mm512_set1_ps(br[j][kk]);
#pragma GCC unroll 4
      for (int v = 0; v < MV; ++v) acc[j][v] = _mm512_fmadd_ps(bb, av[v], acc[j][v]);
    }
  }
  alignas(64) float t[JR][mp];
#pragma GCC unroll 16
  for (int j = 0; j < JR; ++j)
#pragma GCC unroll 4
    for (int v = 0; v < MV; ++v) _mm512_store_ps(&t[j][16 * v], acc[j][v]);
  for (std::size_t i = 0; i < m; ++i) {
    float* ci = c + i * ldc;
    if (beta == 0.0f) {
      for (int j = 0; j < JR; ++j) ci[j] = alpha * t[j][i];
    } else {
      for (int j = 0; j < JR; ++j) ci[j] = alpha * t[j][i] + beta * ci[j];
    }
  }
}

using nt_fn = void (*)(std::size_t, const float*, const float*, std::size_t, float*, std::size_t, std::size_t,
                       float, float);

template <int MV, int... J>
constexpr std::array<nt_fn, sizeof...(J)> nt_row(std::integer_sequence<int, J...>) {
  return {&nt_tile<J + 1, MV>...};
}

template <int... V>
constexpr std::array<std::array<nt_fn, nt_jr_max>, sizeof...(V)> nt_table(std::integer_sequence<int, V...>) {
  return {nt_row<V + 1>(std::make_integer_sequence<int, nt_jr_max>())...};
}

// nt_tiles[mv - 1][jr - 1]
constexpr auto nt_tiles = nt_table(std::make_integer_sequence<int, nt_mv_max>());

struct aligned_free {
  void operator()(float* p) const { std::free(p); }
};

// Per-thread buffer for A^T: pipeline stages call gemm concurrently.
float* pack_buffer(std::size_t floats) {
  thread_local std::size_t capacity = 0;
  thread_local std::unique_ptr<float, aligned_free> buffer;
  if (floats > capacity) {
    const std::size_t bytes = (floats * sizeof(float) + 63) / 64 * 64;
    buffer.reset(static_cast<float*>(std::aligned_alloc(64, bytes)));
    capacity = buffer ? floats : 0;
  }
  return buffer.get();
}

void nt_avx512(std::size_t m, std::size_t n, std::size_t k, float alpha, const float* a, std::size_t lda,
               const float* b, std::size_t ldb, float beta, float* c, std::size_t ldc) {
  const std::size_t mv = (m + 15) / 16;
  const std::size_t mp = 16 * mv;
  float* at = pack_buffer(k * mp);
  if (at == nullptr) return blas_fallback(true, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  // AT[kk][i] = A[i][kk]; padding columns i >= m are zero. Blocks of 16 k keep both sides cache-friendly.
  for (std::size_t k0 = 0; k0 < k; k0 += 16) {
    const std::size_t kb = std::min<std::size_t>(16, k - k0);
    for (std::size_t kk = k0; kk < k0 + kb; ++kk) std::fill(at + kk * mp + m, at + kk * mp + mp, 0.0f);
    for (std::size_t i = 0; i < m; ++i) {
      const float* ai = a + i * lda + k0;
      for (std::size_t kk = 0; kk < kb; ++kk) at[(k0 + kk) * mp + i] = ai[kk];
    }
  }
  const std::size_t jr = static_cast<std::size_t>(nt_jr[mv - 1]);
  for (std::size_t j0 = 0; j0 < n; j0 += jr) {
    const std::size_t rows = std::min(jr, n - j0);
    nt_tiles[mv - 1][rows - 1](k, at, b + j0 * ldb, ldb, c + j0, ldc, m, alpha, beta);
  }
}

#endif  // AP_SMALL_GEMM_AVX512

}  // namespace

bool small_gemm_compiled() { return AP_SMALL_GEMM_AVX512 != 0; }

void small_gemm_nn(std::size_t m, std::size_t n, std::size_t k, float alpha, const float* a, std::size_t lda,
                   const float* b, std::size_t ldb, float beta, float* c, std::size_t ldc) {
  if (m == 0 || n == 0) return;
#if AP_SMALL_GEMM_AVX512
  if (k == 0 || alpha == 0.0f) return scale_c(m, n, beta, c, ldc);
  nn_avx512(m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
#else
  blas_fallback(false, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
#endif
}

void small_gemm_nt(std::size_t m, std::size_t n, std::size_t k, float alpha, const float* a, std::size_t lda,
                   const float* b, std::size_t ldb, float beta, float* c, std::size_t ldc) {
  if (m == 0 || n == 0) return;
#if AP_SMALL_GEMM_AVX512
  if (k == 0 || alpha == 0.0f) return scale_c(m, n, beta, c, ldc);
  if (m > 16 * nt_mv_max) {  // more rows than one A^T panel holds: in slices of 64 rows
    for (std::size_t i0 = 0; i0 < m; i0 += 16 * nt_mv_max)
      nt_avx512(std::min<std::size_t>(16 * nt_mv_max, m - i0), n, k, alpha, a + i0 * lda, lda, b, ldb, beta,
                c + i0 * ldc, ldc);
    return;
  }
  nt_avx512(m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
#else
  blas_fallback(true, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
#endif
}

bool small_gemm_preferred(bool transpose_a, bool transpose_b, std::size_t m, std::size_t n, std::size_t k) {
  if (!small_gemm_compiled() || transpose_a) return false;
  const long limit = tunable(transpose_b ? "AP_SMALL_GEMM_MAX_M_NT" : "AP_SMALL_GEMM_MAX_M_NN", 64);
  return m <= static_cast<std::size_t>(limit) && n * k >= 64 * 1024;
}

}  // namespace ap

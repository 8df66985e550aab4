// AVX-512 kernels for few-row GEMMs (see small_gemm.hpp). Kept apart from xtensor-blas (<cblas.h> clash).
//
// nn, C = A B with B (k, n): register tile of up to 6 rows of A x 64 columns of B (4 zmm) = 24 accumulators;
// per k it broadcasts A[i][k] and loads the 64-float segment of B's row k. B is read straight from its own
// storage (no packed copy) in blocks of 64 rows; within a block, panel by panel of 64 columns (16 KB, stays
// in L1 while every row block of A passes over it). The panel's rows lie a whole row of B apart (8 KB for
// n = 2048), a pattern the hardware prefetchers do not follow, so while one block of rows is multiplied
// the tiles prefetch the next block (contiguous) into L2, a few lines per k spread over all tiles: that
// alone took m = 32, k = n = 2048 from ~53 to ~70-85 GFLOPS here. C tiles are re-read once per block of
// 64 rows. Rows of A are split into balanced blocks of at most 6 (32 = 6+6+5+5+5+5), columns past a
// multiple of 16 use masked loads and stores.
//
// nt, C = A B^T with B stored (n, k): computed as C^T = B A^T. A^T (k x m, m padded to a multiple of 16) is
// the small operand and is packed once per call (m*k floats, e.g. 256 KB for 32 x 2048, in L2); B is
// streamed once, row by row, sequentially. Register tile: nt_jr rows of B x up to 4 zmm of A^T columns
// (<= 24 accumulators); per k it loads the A^T segment and broadcasts B[j][k]. The finished tile is C^T:
// written transposed into C, once per tile (all of k stays in registers: no horizontal sums, no partial
// results). More than 64 rows go in slices of 64 (B streamed once per slice).
//
// Prefetches may run past the end of B: prefetch instructions never fault.
#include "tensor/small_gemm.hpp"

#include <cblas.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <utility>

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

// ---------------------------------------------------------------------------------------------------- nn

constexpr int nn_mr = 6;   // rows of A per register tile
constexpr int nn_nv = 4;   // zmm (16 columns each) per register tile: 64 columns
constexpr std::size_t nn_kc = 64;  // rows of B per block: a 64 x 64 panel (16 KB) stays in L1

template <int H>
inline void prefetch_line(const void* p) {
  if constexpr (H == 1)
    _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T0);
  else if constexpr (H == 2)
    _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T1);
  else
    _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T2);
}

// One register tile: C[0:MR, 0:16*NV) (+)= alpha * A[0:MR, 0:kc) * B[0:kc, 0:16*NV). The first zmm column
// is masked with `head` (columns left of the matrix when the panel starts at a cache line boundary before
// it), the last with `last` (columns past n). `first`: this is the first block of k, so beta applies (and
// beta == 0 skips reading C); later blocks add. Each k also prefetches PF cache lines from pf onwards.
template <int MR, int NV, int PF>
void nn_tile(std::size_t kc, const float* a, std::size_t lda, const float* b, std::size_t ldb, float* c,
             std::size_t ldc, float alpha, float beta, bool first, __mmask16 head, __mmask16 last,
             const float* pf) {
  const __mmask16 mask0 = NV == 1 ? static_cast<__mmask16>(head & last) : head;
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
    bv[0] = _mm512_maskz_loadu_ps(mask0, bk);
#pragma GCC unroll 8
    for (int v = 1; v < NV - 1; ++v) bv[v] = _mm512_loadu_ps(bk + 16 * v);
    if (NV > 1) bv[NV - 1] = _mm512_maskz_loadu_ps(last, bk + 16 * (NV - 1));
#pragma GCC unroll 8
    for (int p = 0; p < PF; ++p) prefetch_line<2>(pf + (k * PF + p) * 16);
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
      const __mmask16 mask = v == 0 ? mask0 : v == NV - 1 ? last : static_cast<__mmask16>(0xFFFF);
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
                       float, float, bool, __mmask16, __mmask16, const float*);

constexpr int nn_pf_levels = 4;  // prefetch 0, 1, 2 or 4 lines per k
constexpr int nn_pf_lines[nn_pf_levels] = {0, 1, 2, 4};

template <int MR, int... V>
constexpr std::array<nn_fn, nn_pf_levels * sizeof...(V)> nn_row(std::integer_sequence<int, V...>) {
  return {&nn_tile<MR, V + 1, 0>..., &nn_tile<MR, V + 1, 1>..., &nn_tile<MR, V + 1, 2>...,
          &nn_tile<MR, V + 1, 4>...};
}

template <int... R>
constexpr std::array<std::array<nn_fn, nn_pf_levels * nn_nv>, sizeof...(R)> nn_table(
    std::integer_sequence<int, R...>) {
  return {nn_row<R + 1>(std::make_integer_sequence<int, nn_nv>())...};
}

// nn_tiles[mr - 1][pf_level * nn_nv + nv - 1]
constexpr auto nn_tiles = nn_table(std::make_integer_sequence<int, nn_mr>());

// p + v - shift for v >= 0, computed on integers: for the first panel it may point up to 15 floats before
// p, into lanes that are masked off and never touched.
template <class T>
T* offset(T* p, std::size_t v, std::size_t shift) {
  return reinterpret_cast<T*>(reinterpret_cast<std::uintptr_t>(p) + v * sizeof(float) - shift * sizeof(float));
}

void nn_avx512(std::size_t m, std::size_t n, std::size_t k, float alpha, const float* a, std::size_t lda,
               const float* b, std::size_t ldb, float beta, float* c, std::size_t ldc) {
  constexpr std::size_t panel = 16 * nn_nv;
  const std::size_t blocks = (m + nn_mr - 1) / nn_mr;
  const std::size_t base = m / blocks, extra = m % blocks;  // the first `extra` blocks get one more row
  // When every row of B starts at the same offset within a cache line (ldb a multiple of 16 floats), shift
  // the panel grid by that offset: 0..15 columns.
  const auto address = reinterpret_cast<std::uintptr_t>(b);
  const std::size_t shift = ldb % 16 == 0 && address % sizeof(float) == 0 ? (address % 64) / sizeof(float) : 0;
  const std::size_t panels = (n + shift + panel - 1) / panel;
  for (std::size_t k0 = 0; k0 < k; k0 += nn_kc) {
    const std::size_t kc = std::min(nn_kc, k - k0);
    const bool first = k0 == 0;
    // While this block of B rows is multiplied, prefetch the next one into L2 (rows [k0 + 64, k0 + 128),
    // contiguous when ldb == n), 1, 2 or 4 lines per k so that it is spread over all tiles of this block.
    const float* pf = nullptr;
    const float* pf_end = nullptr;
    int level = 0;
    if (k0 + nn_kc < k) {
      pf = b + (k0 + nn_kc) * ldb;
      pf_end = b + (std::min(k, k0 + 2 * nn_kc) - 1) * ldb + n;
      const std::size_t lines = static_cast<std::size_t>(pf_end - pf + 15) / 16;
      const std::size_t slots = panels * blocks * kc;
      const std::size_t per_k = (lines + slots - 1) / slots;
      level = per_k <= 1 ? 1 : per_k <= 2 ? 2 : 3;
    }
    // Panels of 64 columns in "virtual" columns v = j + shift, so that every B row segment starts on a
    // cache line (64-byte loads that straddle two lines cost ~15% here); the first panel's head is masked.
    for (std::size_t v0 = 0; v0 < n + shift; v0 += panel) {
      const std::size_t v1 = std::min(v0 + panel, n + shift);
      const std::size_t nv = (v1 - v0 + 15) / 16;
      const __mmask16 head = v0 < shift ? static_cast<__mmask16>(0xFFFFu << (shift - v0)) : 0xFFFF;
      const __mmask16 last = static_cast<__mmask16>(0xFFFFu >> (16 * nv - (v1 - v0)));
      const float* bp = offset(b + k0 * ldb, v0, shift);
      std::size_t i0 = 0;
      for (std::size_t blk = 0; blk < blocks; ++blk) {
        const std::size_t mr = base + (blk < extra ? 1 : 0);
        const int lv = pf < pf_end ? level : 0;
        nn_tiles[mr - 1][lv * nn_nv + nv - 1](kc, a + i0 * lda + k0, lda, bp, ldb, offset(c + i0 * ldc, v0, shift),
                                              ldc, alpha, beta, first, head, last, pf);
        if (lv) pf += kc * 16 * static_cast<std::size_t>(nn_pf_lines[lv]);
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
constexpr int nt_jr[nt_mv_max] = {12, 12, 8, 6};
// Each B row is read one cache line per 16 k; prefetch the line this many floats ahead into L1.
constexpr std::size_t nt_pf_distance = 64;
constexpr int nt_pf_hint = 1;

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
  for (std::size_t k0 = 0; k0 < k; k0 += 16) {
    // One cache line of each B row per 16 k: prefetch the line nt_pf_distance floats ahead.
#pragma GCC unroll 16
    for (int j = 0; j < JR; ++j) prefetch_line<nt_pf_hint>(br[j] + k0 + nt_pf_distance);
    const std::size_t k1 = std::min(k, k0 + 16);
#pragma GCC unroll 1
    for (std::size_t kk = k0; kk < k1; ++kk) {
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

// Measured on the 2-core AVX-512 Xeon this project runs on (best-of-9 thread CPU time, OpenBLAS time /
// kernel time, B from std::vector, i.e. not cache-line aligned):
// nn: 2-4x for m <= 16 and k = n = 2048, 1.5-2.2x at m = 32, 1.2-1.5x at m = 64, still 1.1-1.25x at
// m = 128 when k >= 1024 (about parity at m = 96..128 for k = 784). Loses for n or k below 128 (one
// panel, mostly masked) and, with m < 4, unless B is large (OpenBLAS's small-size path is as fast).
// nt: 1.3-2x for m <= 64 when n and k >= 512; it packs A^T (m * k floats) and writes C^T tile by tile, so
// it needs n, k >= 128 to pay for that; with m < 8 most of the 16 lanes are padding: only a large B (the
// memory-bound case) makes it worth it. Above 64 rows it re-streams B per 64-row slice: 1.1-1.3x for
// k >= 1024, n >= 512, parity below that.
bool small_gemm_preferred(bool transpose_a, bool transpose_b, std::size_t m, std::size_t n, std::size_t k) {
  if (!small_gemm_compiled() || transpose_a || m == 0) return false;
  const std::size_t size = n * k;
  if (!transpose_b) {
    if (n < 128 || k < 128) return false;
    if (m > 128 || (m > 64 && k < 1024)) return false;
    if (m < 4) return size >= (std::size_t{1} << 20);
    if (m < 16) return size >= (std::size_t{1} << 16);
    return true;
  }
  if (n < 128 || k < 128) return false;
  if (m > 128 || (m > 64 && (k < 1024 || n < 512)) || (m > 32 && k < 256)) return false;
  if (m < 4) return size >= (std::size_t{1} << 20);
  if (m < 8) return size >= (std::size_t{1} << 18);
  if (m < 16) return size >= (std::size_t{1} << 16);
  return true;
}

}  // namespace ap

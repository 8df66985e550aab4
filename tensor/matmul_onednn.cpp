// The products on oneDNN's matmul primitive (figures: docs/performance.md).

// Note [primitive cache per thread]: a matmul primitive costs far more to create than to run, so each is kept per
// (shape, transposes, dtype, alpha, beta, threads) in a thread_local cache (no lock; a primitive plans for its
// creating thread's thread count). Its memory objects are re-pointed at each call.

// Note [rows split among the team]: on a rank of N threads, a product whose A is not transposed is cut into N bands
// of rows, each run by a 1-thread primitive: the bits of one call. dW = X^T dY is cut so only where k <= 256. With
// AMX, oneDNN also splits a long K of a bf16 product, so such a weight gradient matches one thread to 1e-5 only.

// Note [bf16 without AVX-512]: oneDNN 2.6 makes bf16 primitives only with AVX-512; without it a bf16 product
// widens A and B to fp32 (exactly) and runs in fp32.

// Note [fp32 products on OpenBLAS without AVX-512]: there oneDNN 2.6's fp32 gemm is slower, so fp32 products run
// on OpenBLAS's sgemm, one single-threaded call per band of rows of C. Bands at multiples of 24 rows give the bits
// of one call (its kernel takes rows by 12); with fewer rows, bands of columns, whose bits depend on the thread
// count, as do attention's batched products, which stay on oneDNN's AVX2 gemm.
#include <algorithm>
#include <climits>
#include <exception>
#include <map>
#include <omp.h>
#include <stdexcept>
#include <string>
#include <tuple>

#include <cblas.h>

#include "tensor/elementwise.hpp"
#include "tensor/matmul.hpp"
#include "tensor/onednn_context.hpp"
#include "tensor/scratch.hpp"

namespace ap {
namespace {

using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

using onednn::engine;
using onednn::stream;

struct cached_matmul {
  dnnl::matmul primitive;
  dnnl::memory a, b, c, bias;  // bias: empty without one
};

// (m, n, k, lda, transpose_a, transpose_b, input dtype, alpha, beta, OpenMP threads, a bias)
using matmul_key = std::tuple<std::size_t, std::size_t, std::size_t, std::size_t, bool, bool, int, float, float, int, bool>;

// With `bias`, C = op(A) op(B) + bias on each row (Note [bias in the product]; alpha 1, beta 0 only).
cached_matmul make_matmul(bool transpose_a, bool transpose_b, std::size_t m, std::size_t n, std::size_t k,
                          std::size_t lda, float alpha, float beta, dt input, bool bias = false) {
  using dims = dnnl::memory::dims;
  const auto M = static_cast<dnnl::memory::dim>(m), N = static_cast<dnnl::memory::dim>(n),
             K = static_cast<dnnl::memory::dim>(k), LDA = static_cast<dnnl::memory::dim>(lda);
  // A transposed operand is the same logical matrix stored column-major (strides {1, lda}).
  const dnnl::memory::desc a_md(dims{M, K}, input, transpose_a ? dims{1, LDA} : dims{LDA, 1});
  const dnnl::memory::desc b_md(dims{K, N}, input, transpose_b ? tag::ba : tag::ab);
  const dnnl::memory::desc c_md(dims{M, N}, dt::f32, tag::ab);
  dnnl::primitive_attr attr;
  if (alpha != 1.0f) attr.set_output_scales(0, {alpha});  // scales op(A) op(B), before the sum below
  if (beta != 0.0f) {
    dnnl::post_ops ops;
    ops.append_sum(beta);  // C = alpha op(A) op(B) + beta C
    attr.set_post_ops(ops);
  }
  if (!bias) {
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, c_md), attr, engine());
    return {dnnl::matmul(pd), dnnl::memory(a_md, engine(), nullptr), dnnl::memory(b_md, engine(), nullptr),
            dnnl::memory(c_md, engine(), nullptr), dnnl::memory()};
  }
  const dnnl::memory::desc bias_md(dims{1, N}, dt::f32, tag::ab);
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, bias_md, c_md), attr, engine());
  return {dnnl::matmul(pd), dnnl::memory(a_md, engine(), nullptr), dnnl::memory(b_md, engine(), nullptr),
          dnnl::memory(c_md, engine(), nullptr), dnnl::memory(bias_md, engine(), nullptr)};
}

// One primitive call on the calling thread's OpenMP team. A transposed A is stored (k, a_columns): a band of
// its columns starts mid-row.
void run_once(bool transpose_a, bool transpose_b, std::size_t m, std::size_t n, std::size_t k, float alpha,
              const void* a, const void* b, float beta, float* c, std::size_t a_columns, dt input,
              const float* bias = nullptr) {
  thread_local std::map<matmul_key, cached_matmul> cache;  // Note [primitive cache per thread]
  const std::size_t lda = transpose_a ? a_columns : k;
  const matmul_key key{m, n, k, lda, transpose_a, transpose_b, static_cast<int>(input), alpha, beta, omp_get_max_threads(),
                       bias != nullptr};
  auto it = cache.find(key);
  if (it == cache.end()) {
    onednn::make_room(cache);  // Note [bounded primitive caches]
    it = cache.emplace(key, make_matmul(transpose_a, transpose_b, m, n, k, lda, alpha, beta, input, bias != nullptr)).first;
  }
  cached_matmul& mm = it->second;
  mm.a.set_data_handle(const_cast<void*>(a));  // oneDNN only reads the inputs
  mm.b.set_data_handle(const_cast<void*>(b));
  mm.c.set_data_handle(c);
  if (!bias) {
    mm.primitive.execute(stream(), {{DNNL_ARG_SRC, mm.a}, {DNNL_ARG_WEIGHTS, mm.b}, {DNNL_ARG_DST, mm.c}});
  } else {
    mm.bias.set_data_handle(const_cast<float*>(bias));
    mm.primitive.execute(stream(), {{DNNL_ARG_SRC, mm.a}, {DNNL_ARG_WEIGHTS, mm.b}, {DNNL_ARG_BIAS, mm.bias},
                                    {DNNL_ARG_DST, mm.c}});
  }
  stream().wait();
}

// How many bands of rows of C a product is cut into on a team of `team` threads (1: one call).
std::size_t band_count(bool transpose_a, std::size_t m, std::size_t k, int team) {
  const auto bands = static_cast<std::size_t>(team < 1 ? 1 : team);
  if (bands < 2) return 1;
  if (!transpose_a) return m >= 512 * bands ? bands : 1;
  return k <= 256 && m >= 256 * bands ? bands : 1;
}

// The first row of C in band `band` of `bands`. A transposed A's band is a block of its columns: cut at multiples
// of 16 floats (a 64-byte line) so no cache line is split between two bands' threads.
std::size_t band_start(bool transpose_a, std::size_t m, std::size_t band, std::size_t bands) {
  const std::size_t even = m * band / bands;
  if (!transpose_a || band == bands) return even;
  return std::min(m, (even + 8) / 16 * 16);
}

bool fp32_on_openblas() { return !onednn_avx512(); }

// Bands of rows of C for OpenBLAS start at multiples of this, bands of columns at multiples of the second.
constexpr std::size_t openblas_band_rows = 24, openblas_band_columns = 16;

// How an OpenBLAS product is cut among a team: `count` bands of rows (multiples of openblas_band_rows) where
// there are rows enough, else of columns; one band for a product too small to be worth a fork.
struct openblas_bands {
  std::size_t count;
  bool of_rows;
};
openblas_bands openblas_band_plan(std::size_t m, std::size_t n, std::size_t k, int team) {
  const auto threads = static_cast<std::size_t>(team < 1 ? 1 : team);
  if (threads < 2 || double(m) * double(n) * double(k) < double(1 << 20)) return {1, true};
  if (m >= threads * openblas_band_rows) return {threads, true};
  return {std::max<std::size_t>(1, std::min(threads, n / openblas_band_columns)), false};
}

// C = alpha op(A) op(B) + beta C on OpenBLAS.
void run_openblas(bool transpose_a, bool transpose_b, std::size_t m, std::size_t n, std::size_t k, float alpha,
                  const float* a, const float* b, float beta, float* c) {
  if (m > std::size_t(INT_MAX) || n > std::size_t(INT_MAX) || k > std::size_t(INT_MAX))
    throw std::length_error("matrix product " + std::to_string(m) + " x " + std::to_string(n) + " over " +
                            std::to_string(k) + ": a dimension exceeds BLAS's int");
  // Rows [r0, r1) and columns [c0, c1) of C (of a transposed A, a block of its columns; of B's rows likewise).
  const auto block = [&](std::size_t r0, std::size_t r1, std::size_t c0, std::size_t c1) {
    cblas_sgemm(CblasRowMajor, transpose_a ? CblasTrans : CblasNoTrans, transpose_b ? CblasTrans : CblasNoTrans,
                int(r1 - r0), int(c1 - c0), int(k), alpha, transpose_a ? a + r0 : a + r0 * k, int(transpose_a ? m : k),
                transpose_b ? b + c0 * k : b + c0, int(transpose_b ? k : n), beta, c + r0 * n + c0, int(n));
  };
  const openblas_bands bands = openblas_band_plan(m, n, k, omp_in_parallel() ? 1 : omp_get_max_threads());
  if (bands.count == 1) return block(0, m, 0, n);
  const std::size_t extent = bands.of_rows ? m : n, unit = bands.of_rows ? openblas_band_rows : openblas_band_columns;
  const auto start = [&](std::size_t band) {  // the multiple of `unit` nearest an even share
    return band == bands.count ? extent : (extent * band / bands.count + unit / 2) / unit * unit;
  };
#pragma omp parallel for num_threads(static_cast<int>(bands.count)) schedule(static, 1)
  for (std::ptrdiff_t band = 0; band < std::ptrdiff_t(bands.count); ++band) {
    const std::size_t first = start(std::size_t(band)), last = start(std::size_t(band) + 1);
    if (first >= last) continue;
    if (bands.of_rows)
      block(first, last, 0, n);
    else
      block(0, m, first, last);
  }
}

// With `bias` (A and B untransposed, alpha 1, beta 0, on oneDNN's AVX-512 kernels): C = A B + bias on each row.
void run(bool transpose_a, bool transpose_b, std::size_t m, std::size_t n, std::size_t k, float alpha,
         const void* a, const void* b, float beta, float* c, dt input, const float* bias = nullptr) {
  if (m == 0 || n == 0) return;
  if (k == 0) {  // an empty sum: oneDNN has no zero-sized reduction; BLAS semantics
    for (std::size_t i = 0; i < m * n; ++i) c[i] = beta == 0.0f ? 0.0f : beta * c[i];
    return;
  }
  if (input == dt::f32 && fp32_on_openblas())
    return run_openblas(transpose_a, transpose_b, m, n, k, alpha, static_cast<const float*>(a),
                        static_cast<const float*>(b), beta, c);
  const std::size_t bands = band_count(transpose_a, m, k, omp_in_parallel() ? 1 : omp_get_max_threads());
  if (bands == 1) {
    run_once(transpose_a, transpose_b, m, n, k, alpha, a, b, beta, c, m, input, bias);
    return;
  }
  const std::size_t element = input == dt::bf16 ? sizeof(bfloat16) : sizeof(float);
  std::exception_ptr failure;  // an exception may not leave an OpenMP region: the first one is rethrown
#pragma omp parallel num_threads(static_cast<int>(bands))
  {
    omp_set_num_threads(1);  // each band's primitive runs on one thread (this region's ICV only)
    // A team smaller than asked for (OpenMP may give fewer threads) runs every band all the same.
    const auto team = static_cast<std::size_t>(omp_get_num_threads());
    for (auto band = static_cast<std::size_t>(omp_get_thread_num()); band < bands; band += team) {
      const std::size_t first = band_start(transpose_a, m, band, bands), last = band_start(transpose_a, m, band + 1, bands);
      // Rows [first, last) of op(A): whole rows of A, or (transposed) columns of A stored (k, m)
      const std::size_t a_offset = transpose_a ? first : first * k;
      try {
        run_once(transpose_a, transpose_b, last - first, n, k, alpha, static_cast<const char*>(a) + a_offset * element,
                 b, beta, c + first * n, m, input, bias);
      } catch (...) {
#pragma omp critical(ap_matmul_band_failure)
        if (!failure) failure = std::current_exception();
      }
    }
  }
  if (failure) std::rethrow_exception(failure);
}

// gemm_bias_onednn for either element type; without AVX-512 kernels, the fill and product it stands for.
template <class T>
void bias_in_product(std::size_t m, std::size_t n, std::size_t k, const T* a, const T* b, const float* bias, float* c,
                     dt input) {
  if (!onednn_avx512() || k == 0) {
    fill_rows(c, m, bias, n);
    return gemm_onednn(false, false, m, n, k, 1.0f, a, b, 1.0f, c);
  }
  run(false, false, m, n, k, 1.0f, a, b, 0.0f, c, input, bias);
}

// Whether oneDNN runs `wanted`'s kernels here. The ISA values are bit sets: each holds every bit of those below it.
bool runs_isa(dnnl::cpu_isa wanted) {
  const auto bits = static_cast<unsigned>(wanted);
  return (static_cast<unsigned>(dnnl::get_effective_cpu_isa()) & bits) == bits;
}

}  // namespace

bool onednn_uses_amx() {
  static const bool amx = runs_isa(dnnl::cpu_isa::avx512_core_amx);
  return amx;
}

bool onednn_avx512() {
  static const bool avx512 = runs_isa(dnnl::cpu_isa::avx512_core);
  return avx512;
}

void gemm_onednn(bool transpose_a, bool transpose_b, std::size_t m, std::size_t n, std::size_t k, float alpha,
                 const float* a, const float* b, float beta, float* c) {
  run(transpose_a, transpose_b, m, n, k, alpha, a, b, beta, c, dt::f32);
}

void gemm_bias_onednn(std::size_t m, std::size_t n, std::size_t k, const float* a, const float* b, const float* bias,
                      float* c) {
  bias_in_product(m, n, k, a, b, bias, c, dt::f32);
}

void gemm_bias_onednn(std::size_t m, std::size_t n, std::size_t k, const bfloat16* a, const bfloat16* b,
                      const float* bias, float* c) {
  bias_in_product(m, n, k, a, b, bias, c, dt::bf16);
}

void gemm_onednn(bool transpose_a, bool transpose_b, std::size_t m, std::size_t n, std::size_t k, float alpha,
                 const bfloat16* a, const bfloat16* b, float beta, float* c) {
  if (onednn_avx512()) return run(transpose_a, transpose_b, m, n, k, alpha, a, b, beta, c, dt::bf16);
  const auto wide = widen_operands(a, m * k, b, k * n);  // Note [bf16 without AVX-512]
  run(transpose_a, transpose_b, m, n, k, alpha, wide.a, wide.b, beta, c, dt::f32);
}

}  // namespace ap

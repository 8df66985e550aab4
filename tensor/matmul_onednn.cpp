// The products on oneDNN's matmul primitive (brgemm kernels: avx512_core for fp32, avx512_core_bf16 for bf16).
//
// Note [primitive cache per thread]: creating a matmul primitive costs far more than running it (toolchain
// notes), so each is created once per (shape, transposes, dtype, alpha, beta, threads) and kept. The cache is
// thread_local rather than one locked map: a pipeline stage runs its own shapes on its own thread, lookups
// need no lock, and a primitive plans its parallelism for the OpenMP thread count of the thread that created
// it (so the count is in the key, and a 1-thread stage never runs a 2-thread plan). The memory objects are
// kept beside each primitive and only re-pointed at the caller's buffers. One engine per process; one stream
// per calling thread.
#include <map>
#include <omp.h>
#include <tuple>

#include "tensor/matmul.hpp"
#include "tensor/onednn_context.hpp"

namespace ap {
namespace {

using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

using onednn::engine;
using onednn::stream;

struct cached_matmul {
  dnnl::matmul primitive;
  dnnl::memory a, b, c;
};

// (m, n, k, transpose_a, transpose_b, input dtype, alpha, beta, OpenMP threads)
using matmul_key = std::tuple<std::size_t, std::size_t, std::size_t, bool, bool, int, float, float, int>;

cached_matmul make_matmul(bool transpose_a, bool transpose_b, std::size_t m, std::size_t n, std::size_t k,
                          float alpha, float beta, dt input) {
  using dims = dnnl::memory::dims;
  const auto M = static_cast<dnnl::memory::dim>(m), N = static_cast<dnnl::memory::dim>(n),
             K = static_cast<dnnl::memory::dim>(k);
  // A transposed operand is the same logical matrix stored column-major: format_tag::ba.
  const dnnl::memory::desc a_md(dims{M, K}, input, transpose_a ? tag::ba : tag::ab);
  const dnnl::memory::desc b_md(dims{K, N}, input, transpose_b ? tag::ba : tag::ab);
  const dnnl::memory::desc c_md(dims{M, N}, dt::f32, tag::ab);
  dnnl::primitive_attr attr;
  if (alpha != 1.0f) attr.set_output_scales(0, {alpha});  // scales op(A) op(B), before the sum below
  if (beta != 0.0f) {
    dnnl::post_ops ops;
    ops.append_sum(beta);  // C = alpha op(A) op(B) + beta C
    attr.set_post_ops(ops);
  }
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, c_md), attr, engine());
  return {dnnl::matmul(pd), dnnl::memory(a_md, engine(), nullptr), dnnl::memory(b_md, engine(), nullptr),
          dnnl::memory(c_md, engine(), nullptr)};
}

void run(bool transpose_a, bool transpose_b, std::size_t m, std::size_t n, std::size_t k, float alpha,
         const void* a, const void* b, float beta, float* c, dt input) {
  if (m == 0 || n == 0) return;
  if (k == 0) {  // an empty sum: oneDNN has no zero-sized reduction; BLAS semantics
    for (std::size_t i = 0; i < m * n; ++i) c[i] = beta == 0.0f ? 0.0f : beta * c[i];
    return;
  }
  thread_local std::map<matmul_key, cached_matmul> cache;  // Note [primitive cache per thread]
  const matmul_key key{m, n, k, transpose_a, transpose_b, static_cast<int>(input), alpha, beta, omp_get_max_threads()};
  auto it = cache.find(key);
  if (it == cache.end()) {
    onednn::make_room(cache);  // Note [bounded primitive caches]
    it = cache.emplace(key, make_matmul(transpose_a, transpose_b, m, n, k, alpha, beta, input)).first;
  }
  cached_matmul& mm = it->second;
  mm.a.set_data_handle(const_cast<void*>(a));  // oneDNN only reads the inputs
  mm.b.set_data_handle(const_cast<void*>(b));
  mm.c.set_data_handle(c);
  mm.primitive.execute(stream(), {{DNNL_ARG_SRC, mm.a}, {DNNL_ARG_WEIGHTS, mm.b}, {DNNL_ARG_DST, mm.c}});
  stream().wait();
}

}  // namespace

void gemm_onednn(bool transpose_a, bool transpose_b, std::size_t m, std::size_t n, std::size_t k, float alpha,
                 const float* a, const float* b, float beta, float* c) {
  run(transpose_a, transpose_b, m, n, k, alpha, a, b, beta, c, dt::f32);
}

void gemm_onednn(bool transpose_a, bool transpose_b, std::size_t m, std::size_t n, std::size_t k, float alpha,
                 const bfloat16* a, const bfloat16* b, float beta, float* c) {
  run(transpose_a, transpose_b, m, n, k, alpha, a, b, beta, c, dt::bf16);
}

}  // namespace ap

// Batched products on one 3-D oneDNN matmul primitive per (batch, shape, transposes, alpha, beta, threads),
// cached per thread (Note [primitive cache per thread]).
#include <map>
#include <omp.h>
#include <tuple>

#include "tensor/batched_matmul.hpp"
#include "tensor/matmul.hpp"
#include "tensor/onednn_context.hpp"
#include "tensor/scratch.hpp"

namespace ap {
namespace {

using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

struct cached_batched_matmul {
  dnnl::matmul primitive;
  dnnl::memory a, b, c;
};

// (batch, m, n, k, transpose_a, transpose_b, alpha, beta, OpenMP threads, input dtype)
using batched_key = std::tuple<std::size_t, std::size_t, std::size_t, std::size_t, bool, bool, float, float, int, int>;

cached_batched_matmul make_batched(bool transpose_a, bool transpose_b, std::size_t batch, std::size_t m,
                                   std::size_t n, std::size_t k, float alpha, float beta, dt input) {
  using dims = dnnl::memory::dims;
  const auto B = static_cast<dnnl::memory::dim>(batch), M = static_cast<dnnl::memory::dim>(m),
             N = static_cast<dnnl::memory::dim>(n), K = static_cast<dnnl::memory::dim>(k);
  // A transposed operand is each matrix stored column-major: format_tag::acb.
  const dnnl::memory::desc a_md(dims{B, M, K}, input, transpose_a ? tag::acb : tag::abc);
  const dnnl::memory::desc b_md(dims{B, K, N}, input, transpose_b ? tag::acb : tag::abc);
  const dnnl::memory::desc c_md(dims{B, M, N}, dt::f32, tag::abc);
  dnnl::primitive_attr attr;
  if (alpha != 1.0f) attr.set_output_scales(0, {alpha});
  if (beta != 0.0f) {
    dnnl::post_ops ops;
    ops.append_sum(beta);
    attr.set_post_ops(ops);
  }
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, c_md), attr, onednn::engine());
  return {dnnl::matmul(pd), dnnl::memory(a_md, onednn::engine(), nullptr),
          dnnl::memory(b_md, onednn::engine(), nullptr), dnnl::memory(c_md, onednn::engine(), nullptr)};
}

void run(bool transpose_a, bool transpose_b, std::size_t batch, std::size_t m, std::size_t n, std::size_t k,
         float alpha, const void* a, const void* b, float beta, float* c, dt input) {
  if (batch == 0 || m == 0 || n == 0) return;
  if (k == 0) {  // an empty sum, as gemm_onednn
    for (std::size_t i = 0; i < batch * m * n; ++i) c[i] = beta == 0.0f ? 0.0f : beta * c[i];
    return;
  }
  thread_local std::map<batched_key, cached_batched_matmul> cache;
  const batched_key key{batch, m, n, k, transpose_a, transpose_b, alpha, beta, omp_get_max_threads(),
                        static_cast<int>(input)};
  auto it = cache.find(key);
  if (it == cache.end()) {
    onednn::make_room(cache);  // Note [bounded primitive caches]
    it = cache.emplace(key, make_batched(transpose_a, transpose_b, batch, m, n, k, alpha, beta, input)).first;
  }
  cached_batched_matmul& mm = it->second;
  mm.a.set_data_handle(const_cast<void*>(a));
  mm.b.set_data_handle(const_cast<void*>(b));
  mm.c.set_data_handle(c);
  mm.primitive.execute(onednn::stream(), {{DNNL_ARG_SRC, mm.a}, {DNNL_ARG_WEIGHTS, mm.b}, {DNNL_ARG_DST, mm.c}});
  onednn::stream().wait();
}

}  // namespace

void batched_gemm_onednn(bool transpose_a, bool transpose_b, std::size_t batch, std::size_t m, std::size_t n,
                         std::size_t k, float alpha, const float* a, const float* b, float beta, float* c) {
  run(transpose_a, transpose_b, batch, m, n, k, alpha, a, b, beta, c, dt::f32);
}

void batched_gemm_onednn(bool transpose_a, bool transpose_b, std::size_t batch, std::size_t m, std::size_t n,
                         std::size_t k, float alpha, const bfloat16* a, const bfloat16* b, float beta, float* c) {
  if (onednn_avx512()) return run(transpose_a, transpose_b, batch, m, n, k, alpha, a, b, beta, c, dt::bf16);
  // Note [bf16 without AVX-512]
  const auto wide = widen_operands(a, batch * m * k, b, batch * k * n);
  run(transpose_a, transpose_b, batch, m, n, k, alpha, wide.a, wide.b, beta, c, dt::f32);
}

}  // namespace ap

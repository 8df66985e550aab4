// Layer norm forward on oneDNN's primitive (simple_layer_normalization), cached per thread and shape like the
// matmuls (Note [primitive cache per thread] in matmul_onednn.cpp).
#include <cmath>
#include <map>
#include <omp.h>
#include <tuple>
#include <vector>

#include "tensor/nn_ops.hpp"
#include "tensor/onednn_context.hpp"

namespace ap {
namespace {

using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;
using onednn::engine;
using onednn::stream;

dnnl::memory at(const dnnl::memory::desc& md, const float* p) { return dnnl::memory(md, engine(), const_cast<float*>(p)); }

struct layer_norm_primitive {
  dnnl::memory::desc data, stats, weights;
  dnnl::layer_normalization_forward forward;
};

layer_norm_primitive& layer_norm_for(std::size_t rows, std::size_t cols, float eps) {
  thread_local std::map<std::tuple<std::size_t, std::size_t, float, int>, layer_norm_primitive> cache;
  const auto key = std::make_tuple(rows, cols, eps, omp_get_max_threads());
  auto it = cache.find(key);
  if (it == cache.end()) {
    onednn::make_room(cache);  // Note [bounded primitive caches]
    const auto R = static_cast<dnnl::memory::dim>(rows), C = static_cast<dnnl::memory::dim>(cols);
    const dnnl::memory::desc data({R, C}, dt::f32, tag::ab), stats({R}, dt::f32, tag::a), weights({C}, dt::f32, tag::a);
    const dnnl::layer_normalization_forward::primitive_desc pd(
        dnnl::layer_normalization_forward::desc(dnnl::prop_kind::forward_training, data, eps,
                                                dnnl::normalization_flags::use_scale | dnnl::normalization_flags::use_shift),
        engine());
    it = cache.emplace(key, layer_norm_primitive{data, stats, weights, dnnl::layer_normalization_forward(pd)}).first;
  }
  return it->second;
}

}  // namespace

void layer_norm_forward_onednn(const float* x, const float* gamma, const float* beta, float eps, std::size_t rows,
                               std::size_t cols, float* y, float* mean, float* rstd) {
  if (rows == 0) return;
  auto& ln = layer_norm_for(rows, cols, eps);
  // oneDNN gives the variance; the layer keeps rstd = 1 / sqrt(variance + eps) for its backward.
  thread_local std::vector<float> variance;
  variance.resize(rows);
  ln.forward.execute(stream(), {{DNNL_ARG_SRC, at(ln.data, x)},
                                {DNNL_ARG_DST, at(ln.data, y)},
                                {DNNL_ARG_SCALE, at(ln.weights, gamma)},
                                {DNNL_ARG_SHIFT, at(ln.weights, beta)},
                                {DNNL_ARG_MEAN, at(ln.stats, mean)},
                                {DNNL_ARG_VARIANCE, at(ln.stats, variance.data())}});
  stream().wait();
  for (std::size_t r = 0; r < rows; ++r) rstd[r] = 1.0f / std::sqrt(variance[r] + eps);
}

}  // namespace ap

#include "model/relu.hpp"

#include "tensor/compute.hpp"

namespace ap {

tensor relu::forward(const tensor& x, layer_cache& cache, const forward_context&) const {
  if (compute_dtype() == dtype::bfloat16) {  // y stashed in bfloat16 (exact for bf16 x) (Note [compute dtype])
    tensor y = tensor::from_shape(x.shape());
    const float* px = x.data();
    float* py = y.data();
    const std::ptrdiff_t n = static_cast<std::ptrdiff_t>(x.size());
#pragma omp parallel for simd schedule(static) if (n >= parallel_elements)
    for (std::ptrdiff_t i = 0; i < n; ++i) py[i] = px[i] > 0.0f ? px[i] : 0.0f;
    stash_as(cache.emplace<saved>().y, y, dtype::bfloat16);
    return y;
  }
  // y is written twice in one parallel pass, into the cache and for the caller, rather than copied serially.
  tensor& y = cache.emplace<saved>().y;
  if (y.shape() != x.shape()) y = tensor::from_shape(x.shape());
  tensor out = tensor::from_shape(x.shape());
  const float* px = x.data();
  float* py = y.data();
  float* po = out.data();
  const std::ptrdiff_t n = static_cast<std::ptrdiff_t>(x.size());
#pragma omp parallel for simd schedule(static) if (n >= parallel_elements)  // Note [parallel element loops]
  for (std::ptrdiff_t i = 0; i < n; ++i) py[i] = po[i] = px[i] > 0.0f ? px[i] : 0.0f;
  return out;
}

void relu::backward_input(const tensor& dy, layer_cache& cache, tensor* dx) const {
  tensor scratch;
  const tensor& y = float32_view(cache.get<saved>(*this).y, scratch);
  check_dy_shape(dy, shape_of(y), *this);
  if (!dx) return;
  const float* py = y.data();
  const float* pdy = dy.data();
  accumulate_elementwise(*dx, shape_of(y), *this, [=](std::size_t i) { return py[i] > 0.0f ? pdy[i] : 0.0f; });
}

}  // namespace ap

#include "model/sigmoid.hpp"

#include <cmath>

namespace ap {

tensor sigmoid::forward(const tensor& x, layer_cache& cache, const forward_context&) const {
  tensor y = tensor::from_shape(x.shape());
  const float* px = x.data();
  float* py = y.data();
  // exp(-x) overflows to inf for x < -88, giving exactly 0: the right limit, no NaN.
  for (std::size_t i = 0; i < x.size(); ++i) py[i] = 1.0f / (1.0f + std::exp(-px[i]));
  stash_as(cache.emplace<saved>().y, y, compute_dtype());  // Note [compute dtype]
  return y;
}

void sigmoid::backward_input(const tensor& dy, layer_cache& cache, tensor* dx) const {
  tensor scratch;
  const tensor& y = float32_view(cache.get<saved>(*this).y, scratch);
  check_dy_shape(dy, shape_of(y), *this);
  if (!dx) return;
  const float* py = y.data();
  const float* pdy = dy.data();
  accumulate_elementwise(*dx, shape_of(y), *this, [=](std::size_t i) { return py[i] * (1.0f - py[i]) * pdy[i]; });
}

}  // namespace ap

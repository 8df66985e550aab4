#include "model/tanh.hpp"

#include <cmath>

namespace ap {

tensor tanh_layer::forward(const tensor& x, layer_cache& cache, const forward_context&) const {
  tensor y = tensor::from_shape(x.shape());
  const float* px = x.data();
  float* py = y.data();
  for (std::size_t i = 0; i < x.size(); ++i) py[i] = std::tanh(px[i]);
  stash_as(cache.emplace<saved>().y, y, compute_dtype());  // Note [compute dtype]
  return y;
}

void tanh_layer::backward_input(const tensor& dy, layer_cache& cache, tensor* dx) const {
  tensor scratch;
  const tensor& y = float32_view(cache.get<saved>(*this).y, scratch);
  check_dy_shape(dy, shape_of(y), *this);
  if (!dx) return;
  const float* py = y.data();
  const float* pdy = dy.data();
  accumulate_elementwise(*dx, shape_of(y), *this, [=](std::size_t i) { return (1.0f - py[i] * py[i]) * pdy[i]; });
}

}  // namespace ap

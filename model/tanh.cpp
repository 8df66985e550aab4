#include "model/tanh.hpp"

#include <cmath>

#include "model/elementwise.hpp"

namespace ap {

tensor tanh_layer::forward(const tensor& x, layer_cache& cache, const forward_context&) const {
  tensor y = tensor::from_shape(x.shape());
  const float* px = x.data();
  float* py = y.data();
  for (std::size_t i = 0; i < x.size(); ++i) py[i] = std::tanh(px[i]);
  cache.saved.assign({y});
  return y;
}

tensor tanh_layer::backward_input(const tensor& dy, const layer_cache& cache) const {
  const tensor& y = saved_matching(*this, dy, cache);
  tensor dx = tensor::from_shape(dy.shape());
  const float* py = y.data();
  const float* pdy = dy.data();
  float* pdx = dx.data();
  for (std::size_t i = 0; i < dy.size(); ++i) pdx[i] = (1.0f - py[i] * py[i]) * pdy[i];
  return dx;
}

}  // namespace ap

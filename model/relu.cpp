#include "model/relu.hpp"

#include "model/elementwise.hpp"

namespace ap {

tensor relu::forward(const tensor& x, layer_cache& cache, const forward_context&) const {
  // y is written once, straight into the cache, and copied once for the caller (assign({y}) copied twice).
  cache.saved.resize(1);
  tensor& y = cache.saved[0];
  if (y.shape() != x.shape()) y = tensor::from_shape(x.shape());
  const float* px = x.data();
  float* py = y.data();
  for (std::size_t i = 0, n = x.size(); i < n; ++i) py[i] = px[i] > 0.0f ? px[i] : 0.0f;
  return y;
}

tensor relu::backward_input(const tensor& dy, const layer_cache& cache) const {
  const tensor& y = saved_matching(*this, dy, cache);
  tensor dx = tensor::from_shape(dy.shape());
  const float* py = y.data();
  const float* pdy = dy.data();
  float* pdx = dx.data();
  for (std::size_t i = 0, n = dy.size(); i < n; ++i) pdx[i] = py[i] > 0.0f ? pdy[i] : 0.0f;
  return dx;
}

}  // namespace ap

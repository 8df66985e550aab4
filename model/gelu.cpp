#include "model/gelu.hpp"

#include "model/elementwise.hpp"
#include "tensor/nn_ops.hpp"

namespace ap {

tensor gelu::forward(const tensor& x, layer_cache& cache, const forward_context&) const {
  tensor y = tensor::from_shape(x.shape());
  gelu_forward(x.data(), y.data(), x.size());  // tensor/nn_ops.hpp: oneDNN's JIT kernel, or the reference loop
  cache.saved.assign({x});
  return y;
}

tensor gelu::backward_input(const tensor& dy, const layer_cache& cache) const {
  const tensor& x = saved_matching(*this, dy, cache);
  tensor dx = tensor::from_shape(dy.shape());
  gelu_backward(x.data(), dy.data(), dx.data(), dy.size());
  return dx;
}

}  // namespace ap

#include "model/gelu.hpp"

#include <vector>

#include "tensor/elementwise.hpp"
#include "tensor/nn_ops.hpp"

namespace ap {

tensor gelu::forward(const tensor& x, layer_cache& cache, const forward_context&) const {
  tensor y = tensor::from_shape(x.shape());
  gelu_forward(x.data(), y.data(), x.size());  // tensor/nn_ops.hpp: oneDNN's JIT kernel, or the reference loop
  stash_as(cache.emplace<saved>().x, x, compute_dtype());  // Note [compute dtype]
  return y;
}

tensor gelu::forward_owned(tensor&& x, layer_cache& cache, const forward_context& ctx) const {
  if (compute_dtype() != dtype::float32) return forward(x, cache, ctx);
  tensor y = tensor::from_shape(x.shape());
  gelu_forward(x.data(), y.data(), x.size());
  cache.emplace<saved>().x = std::move(x);  // Note [owned input]: the stash, uncopied
  return y;
}

void gelu::backward_input(const tensor& dy, layer_cache& cache, tensor* dx) const {
  tensor scratch;
  const tensor& x = float32_view(cache.get<saved>(*this).x, scratch);
  check_dy_shape(dy, shape_of(x), *this);
  if (!dx) return;
  bool fresh = false;
  float* pdx = accumulate_into(*dx, shape_of(x), *this, &fresh);
  if (fresh) {
    gelu_backward(x.data(), dy.data(), pdx, dy.size());
    return;
  }
  // Note [dx accumulates]: the kernel assigns, so a dx that already holds a gradient adds a fresh one.
  tensor local = tensor::from_shape(x.shape());
  gelu_backward(x.data(), dy.data(), local.data(), dy.size());
  const float* pl = local.data();
  add_into(pdx, pl, local.size());
}

}  // namespace ap

// The finite-difference oracle shared by the layer and block tests.
#pragma once

#include <doctest/doctest.h>

#include <functional>

#include "model/layer.hpp"
#include "test_support.hpp"

namespace ap::test {

// Central differences of objective(forward(x), r) w.r.t. every element of `target`.
inline tensor numeric_gradient(const std::function<double()>& f, tensor& target, float eps) {
  tensor grad = tensor::from_shape(target.shape());
  for (std::size_t i = 0; i < target.size(); ++i) {
    const float saved = target.data()[i];
    target.data()[i] = saved + eps;
    const double plus = f();
    target.data()[i] = saved - eps;
    const double minus = f();
    target.data()[i] = saved;
    grad.data()[i] = static_cast<float>((plus - minus) / (2.0 * double(eps)));
  }
  return grad;
}

// The gradient oracle of every layer: backward's dx and parameter gradients against finite differences.
inline void check_layer_gradients(layer& l, tensor x, const forward_context& ctx, float eps = 1e-2f) {
  layer_cache cache;
  const tensor y = l.forward(x, cache, ctx);
  const tensor r = random_tensor(shape_of(y), 99);
  for (parameter& p : l.parameters("")) std::fill(p.grad->begin(), p.grad->end(), 0.0f);
  const tensor dx = l.backward(r, cache);

  const auto f = [&] {
    layer_cache scratch;
    return objective(l.forward(x, scratch, ctx), r);
  };
  const double atol = 2e-3, rtol = 1e-2;
  CHECK(check_close(dx, numeric_gradient(f, x, eps), atol, rtol, l.describe() + " dx"));
  for (parameter& p : l.parameters("")) {
    const tensor numeric = numeric_gradient(f, *p.value, eps);
    CHECK(check_close(*p.grad, numeric, atol, rtol, l.describe() + " d" + p.name));
  }
}

}  // namespace ap::test

namespace ap::test {

// backward_input then backward_weight (on a copy of the layer) gives exactly the dx and parameter gradients of
// backward(); with dx == nullptr the parameter gradients are the same too (Note [backward split]).
inline void check_split_equals_full(const layer& original, const tensor& x, const forward_context& ctx) {
  auto full = original.clone(), split = original.clone(), weights_only = original.clone();
  for (auto* l : {full.get(), split.get(), weights_only.get()})
    for (parameter& p : l->parameters("")) std::fill(p.grad->begin(), p.grad->end(), 0.0f);
  layer_cache c1, c2, c3;
  const tensor y = full->forward(x, c1, ctx);
  split->forward(x, c2, ctx);
  weights_only->forward(x, c3, ctx);
  const tensor dy = random_tensor(shape_of(y), 98);
  const tensor dx = full->backward(dy, c1);
  tensor dx_split;
  split->backward_input(dy, c2, &dx_split);
  split->backward_weight(dy, c2);
  weights_only->backward(dy, c3, nullptr);
  CHECK(dx_split == dx);
  auto pf = full->parameters(""), ps = split->parameters(""), pw = weights_only->parameters("");
  for (std::size_t i = 0; i < pf.size(); ++i) {
    CAPTURE(pf[i].name);
    CHECK(*ps[i].grad == *pf[i].grad);
    CHECK(*pw[i].grad == *pf[i].grad);
  }
}

}  // namespace ap::test

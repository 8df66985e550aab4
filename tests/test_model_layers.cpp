// Every layer against finite differences, plus the properties the pipeline relies on (split backward, dropout).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <stdexcept>

#include "model/attention.hpp"
#include "model/dropout.hpp"
#include "model/gelu.hpp"
#include "model/layer_norm.hpp"
#include "model/linear.hpp"
#include "model/relu.hpp"
#include "random/seeded_random.hpp"
#include "model/sigmoid.hpp"
#include "model/tanh.hpp"
#include "tensor/compute.hpp"
#include "gradient_check.hpp"
#include "test_support.hpp"

using namespace ap;

namespace {

using namespace ap::test;

// Inputs at least 0.2 away from 0, where ReLU has its kink (the differences use eps 1e-2).
tensor away_from_zero(tensor x) {
  for (float& v : x) v = v < 0 ? v - 0.2f : v + 0.2f;
  return x;
}

const forward_context training{true, 7, 0};

}  // namespace

TEST_CASE("Linear: y = x W + b on a hand-computed case") {
  linear l(2, 3);
  auto params = l.parameters("");
  *params[0].value = from_values({2, 3}, {1, 2, 3, 4, 5, 6});  // (in, out)
  *params[1].value = from_values({3}, {0.5f, -0.5f, 1});
  layer_cache cache;
  const tensor y = l.forward(from_values({1, 2}, {1, -1}), cache, training);
  CHECK(y == from_values({1, 3}, {-2.5f, -3.5f, -2}));
}

TEST_CASE("finite differences: Linear, rank-3 input") {
  linear l(4, 5);
  l.initialize(3);
  *l.parameters("")[1].value = random_tensor({5}, 4);  // a non-zero bias, so its gradient is exercised
  check_layer_gradients(l, random_tensor({2, 3, 4}, 5), training);
}

TEST_CASE("finite differences: ReLU away from its kink") {
  relu l;
  check_layer_gradients(l, away_from_zero(random_tensor({3, 7}, 6)), training);
}

TEST_CASE("finite differences: GELU, Tanh, Sigmoid") {
  const tensor x = random_tensor({3, 7}, 7, 3.0f);
  gelu g;
  check_layer_gradients(g, x, training, 3e-3f);
  tanh_layer t;
  check_layer_gradients(t, x, training, 3e-3f);
  sigmoid s;
  check_layer_gradients(s, x, training, 3e-3f);
}

TEST_CASE("finite differences: LayerNorm with non-trivial gamma and beta") {
  layer_norm l(6);
  auto params = l.parameters("");
  *params[0].value = random_tensor({6}, 8) + 1.0f;
  *params[1].value = random_tensor({6}, 9);
  check_layer_gradients(l, random_tensor({2, 2, 6}, 10, 2.0f), training, 3e-3f);
}

TEST_CASE("LayerNorm normalises each row to mean 0 and variance 1 (gamma 1, beta 0)") {
  layer_norm l(5);
  layer_cache cache;
  const tensor y = l.forward(random_tensor({3, 5}, 11, 4.0f) + 10.0f, cache, training);
  for (std::size_t r = 0; r < 3; ++r) {
    double mean = 0.0, var = 0.0;
    for (std::size_t i = 0; i < 5; ++i) mean += y(r, i) / 5.0;
    for (std::size_t i = 0; i < 5; ++i) var += (y(r, i) - mean) * (y(r, i) - mean) / 5.0;
    CHECK(mean == doctest::Approx(0.0).epsilon(1e-5));
    CHECK(var == doctest::Approx(1.0).epsilon(1e-3));
  }
}

TEST_CASE("finite differences: Dropout in training mode") {
  dropout l(0.3f, 12);
  check_layer_gradients(l, random_tensor({4, 6}, 13), training);
}

TEST_CASE("backward is exactly backward_input plus backward_weight, in either order for a plain layer") {
  std::vector<std::unique_ptr<layer>> layers;
  layers.push_back(std::make_unique<linear>(4, 3));
  layers.push_back(std::make_unique<layer_norm>(4));
  for (auto& l : layers) {
    CAPTURE(l->describe());
    l->initialize(14);
    const tensor x = random_tensor({5, 4}, 15);
    auto split = l->clone();
    layer_cache cache;
    const tensor y = l->forward(x, cache, training);
    const tensor dy = random_tensor(shape_of(y), 16);
    const tensor dx = l->backward(dy, cache);
    split->backward_weight(dy, cache);  // the same cache, weight gradient first: a plain layer changes neither
    tensor dx_split;
    split->backward_input(dy, cache, &dx_split);
    CHECK(dx_split == dx);
    auto whole = l->parameters(""), parts = split->parameters("");
    for (std::size_t i = 0; i < whole.size(); ++i) CHECK(*parts[i].grad == *whole[i].grad);
  }
}

TEST_CASE("forward_owned gives forward's bits and keeps the given input as the stash, uncopied") {
  // Sequential and blocks give up each activation to the layer after; Linear and GELU in float32 keep that very buffer
  // for their backward, attention passes its input on to its QKV projection (Note [owned input]).
  for (const dtype type : {dtype::float32, dtype::bfloat16}) {
    std::vector<std::pair<std::unique_ptr<layer>, shape_t>> cases;
    cases.emplace_back(std::make_unique<linear>(16, 8), shape_t{6, 16});
    cases.emplace_back(std::make_unique<gelu>(), shape_t{6, 16});
    cases.emplace_back(std::make_unique<causal_self_attention>(16, 2), shape_t{2, 4, 16});
    for (auto& [l, shape] : cases) {
      CAPTURE(l->describe());
      CAPTURE(dtype_name(type));
      l->initialize(31);
      l->set_compute_dtype(type);
      auto owner = l->clone();
      const tensor x = random_tensor(shape, 32);
      layer_cache kept, given;
      const tensor y = l->forward(x, kept, training);
      tensor x_given = x;
      const float* buffer = x_given.data();
      const tensor y_given = owner->forward_owned(std::move(x_given), given, training);
      CHECK(y_given == y);
      if (type == dtype::float32) {
        if (auto* lin = dynamic_cast<const linear*>(l.get())) CHECK(given.get<linear::saved>(*lin).x.data() == buffer);
        if (auto* g = dynamic_cast<const gelu*>(l.get())) CHECK(given.get<gelu::saved>(*g).x.data() == buffer);
      }
      const tensor dy = random_tensor(shape_of(y), 33);
      CHECK(owner->backward(dy, given) == l->backward(dy, kept));
      auto a = l->parameters(""), b = owner->parameters("");
      for (std::size_t i = 0; i < a.size(); ++i) CHECK(*b[i].grad == *a[i].grad);
    }
  }
}

TEST_CASE("a bfloat16 Linear's weight gradient is the same with or without backward_input before it") {
  // backward_input keeps the dy it rounded for backward_weight (one rounding, not two); without it,
  // backward_weight rounds dy itself.
  linear l(8, 4);
  l.initialize(34);
  l.set_compute_dtype(dtype::bfloat16);
  auto alone = l.clone();
  const tensor x = random_tensor({5, 8}, 35), dy = random_tensor({5, 4}, 36);
  layer_cache both_cache, alone_cache;
  l.forward(x, both_cache, training);
  alone->forward(x, alone_cache, training);
  tensor dx;
  l.backward_input(dy, both_cache, &dx);
  l.backward_weight(dy, both_cache);
  alone->backward_weight(dy, alone_cache);
  auto a = l.parameters(""), b = alone->parameters("");
  for (std::size_t i = 0; i < a.size(); ++i) CHECK(*b[i].grad == *a[i].grad);
  CHECK(both_cache.get<linear::saved>(l).dy_bf16.type() != dtype::bfloat16);  // dropped after use, not kept
}

TEST_CASE("a bfloat16 Linear multiplies the weights as they are now: after they change, and on either backend, a fresh copy's bits") {
  // Its rounded copy of the weights (bfloat16, or float32 where bf16 products widen) is remade when the weights change
  // and when the backend's kind of product does (Note [bf16 weights kept widened]).
  linear l(64, 48);
  l.initialize(37);
  l.set_compute_dtype(dtype::bfloat16);
  const tensor x = random_tensor({33, 64}, 38), dy = random_tensor({33, 48}, 39);
  const auto same_as_fresh = [&](const char* when) {
    INFO(when, " on ", compute_backend_name(current_compute_backend()));
    linear fresh(64, 48);  // its rounded copy never made, given l's weights and bias as they are now
    fresh.set_compute_dtype(dtype::bfloat16);
    *fresh.parameters("")[0].value = *l.parameters("")[0].value;
    *fresh.parameters("")[1].value = *l.parameters("")[1].value;
    layer_cache mine, theirs;
    CHECK(l.forward(x, mine, training) == fresh.forward(x, theirs, training));
    tensor dx_mine, dx_theirs;
    l.backward_input(dy, mine, &dx_mine);
    fresh.backward_input(dy, theirs, &dx_theirs);
    CHECK(dx_mine == dx_theirs);
  };
  same_as_fresh("first use");
  // An optimizer step's kind of change: the weights written in place.
  for (float& w : *l.parameters("")[0].value) w *= 1.5f;
  same_as_fresh("after the weights changed");
  const compute_backend was = current_compute_backend();
  for (compute_backend backend : {compute_backend::reference, compute_backend::onednn}) {
    if (backend == compute_backend::onednn && !onednn_available()) continue;
    set_compute_backend(backend);
    same_as_fresh("after a backend switch");
  }
  set_compute_backend(was);
}

TEST_CASE("backward accumulates into the gradients") {
  linear l(3, 2);
  l.initialize(17);
  layer_cache cache;
  const tensor y = l.forward(random_tensor({4, 3}, 18), cache, training);
  const tensor dy = random_tensor(shape_of(y), 19);
  l.backward_weight(dy, cache);
  const tensor once = *l.parameters("")[0].grad;
  l.backward_weight(dy, cache);
  CHECK(check_close(*l.parameters("")[0].grad, once * 2.0f, 1e-6, 1e-6, "dweight after two backwards"));
}

TEST_CASE("Linear initialisation: seeded, Kaiming-uniform bound, zero bias") {
  linear a(50, 40), b(50, 40), c(50, 40);
  a.initialize(5);
  b.initialize(5);
  c.initialize(6);
  const tensor& wa = *a.parameters("")[0].value;
  CHECK(wa == *b.parameters("")[0].value);
  CHECK(wa != *c.parameters("")[0].value);
  const float bound = std::sqrt(6.0f / 50.0f);
  float lo = 0, hi = 0;
  for (float v : wa) lo = std::min(lo, v), hi = std::max(hi, v);
  CHECK(lo >= -bound);
  CHECK(hi < bound);
  CHECK(lo < -0.9f * bound);  // 2000 draws fill the range
  CHECK(hi > 0.9f * bound);
  for (float v : *a.parameters("")[1].value) CHECK(v == 0.0f);
}

TEST_CASE("Dropout: the mask depends only on (seed, step, sample, unit)") {
  dropout d(0.5f, 21);
  const tensor x = random_tensor({8, 16}, 22) + 2.0f;  // no zero inputs, so a zero output means dropped
  layer_cache c1, c2;
  const tensor full = d.forward(x, c1, {true, 3, 0});
  CHECK(d.forward(x, c2, {true, 3, 0}) == full);
  CHECK(dropout(0.5f, 21).forward(x, c2, {true, 3, 0}) == full);  // a fresh layer: no hidden state
  CHECK(d.forward(x, c2, {true, 4, 0}) != full);                  // a new step, a new mask
  CHECK(dropout(0.5f, 22).forward(x, c2, {true, 3, 0}) != full);  // a new seed, a new mask

  SUBCASE("microbatches drop exactly the units of the full batch") {
    const tensor first = d.forward(slice_rows(x, 0, 3), c1, {true, 3, 0});
    const tensor second = d.forward(slice_rows(x, 3, 8), c2, {true, 3, 3});
    CHECK(first == slice_rows(full, 0, 3));
    CHECK(second == slice_rows(full, 3, 8));
  }
  SUBCASE("kept units are scaled by 1 / (1 - p), about p of them dropped") {
    std::size_t dropped = 0;
    for (std::size_t i = 0; i < x.size(); ++i) {
      if (full.data()[i] == 0.0f)
        ++dropped;
      else
        CHECK(full.data()[i] == x.data()[i] * 2.0f);
    }
    CHECK(dropped > 40);
    CHECK(dropped < 88);
  }
  SUBCASE("eval mode is the identity, forward and backward") {
    layer_cache cache;
    CHECK(d.forward(x, cache, {false, 3, 0}) == x);
    CHECK(d.backward(x, cache) == x);
  }
}

TEST_CASE("Dropout: a (batch, time, features) input keys the mask by the sample along the first axis") {
  dropout d(0.5f, 23);
  const tensor x = random_tensor({4, 3, 5}, 24) + 2.0f;
  layer_cache c;
  const tensor full = d.forward(x, c, {true, 1, 0});
  CHECK(d.forward(slice_rows(x, 2, 4), c, {true, 1, 2}) == slice_rows(full, 2, 4));
}

TEST_CASE("make_layer rebuilds every layer from its spec, and describe names it") {
  struct expect { std::string spec, description; double flops; };
  for (const expect& e : {expect{"linear:784:512", "Linear(784->512)", 2.0 * 784 * 512},
                          expect{"relu", "ReLU", 0}, expect{"gelu", "GELU", 0}, expect{"tanh", "Tanh", 0},
                          expect{"sigmoid", "Sigmoid", 0}, expect{"layernorm:512", "LayerNorm(512)", 0},
                          expect{"dropout:0.1:42", "Dropout(0.1)", 0}}) {
    CAPTURE(e.spec);
    auto l = make_layer(e.spec);
    CHECK(l->spec() == e.spec);
    CHECK(l->describe() == e.description);
    CHECK(l->flops_per_row() == e.flops);
  }
  CHECK(make_layer("linear:784:512")->in_features() == std::optional<std::size_t>(784));
  CHECK(make_layer("linear:784:512")->out_features() == std::optional<std::size_t>(512));
  CHECK_FALSE(make_layer("relu")->in_features());
}

TEST_CASE("make_layer names the bad text") {
  for (const char* bad : {"linear:784", "linear:784:-5", "linear:0:10", "linear:7x:3", "relu:3", "conv:3",
                          "dropout:1.5:3", "dropout:0.1", "layernorm:", ""}) {
    CAPTURE(bad);
    try {
      make_layer(bad);
      FAIL("no exception");
    } catch (const std::invalid_argument& e) {
      CHECK(std::string(e.what()).find("'" + std::string(bad) + "'") != std::string::npos);
    }
  }
}

TEST_CASE("clone is a deep copy") {
  linear a(3, 2);
  a.initialize(25);
  auto b = a.clone();
  const tensor before = *a.parameters("")[0].value;
  *b->parameters("")[0].value += 1.0f;
  CHECK(*a.parameters("")[0].value == before);
  CHECK(a.parameters("3.")[0].name == "3.weight");
  CHECK(layer_norm(4).parameters("2.")[1].name == "2.beta");
}

TEST_CASE("a wrong input width or dy shape throws naming the layer and the shape") {
  linear l(4, 3);
  layer_cache cache;
  CHECK_THROWS_WITH_AS(l.forward(zeros({2, 5}), cache, training),
                       "Linear(4->3) takes 4 features, got input of shape (2, 5)", std::invalid_argument);
  l.forward(zeros({2, 4}), cache, training);
  CHECK_THROWS_AS(l.backward(zeros({3, 3}), cache), std::invalid_argument);
  relu r;
  r.forward(zeros({2, 4}), cache, training);
  CHECK_THROWS_AS(r.backward(zeros({2, 5}), cache), std::invalid_argument);
}

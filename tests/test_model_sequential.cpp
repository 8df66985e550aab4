// Sequential: the split backward, microbatches in flight, seeded slices, and the errors a user sees.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <stdexcept>

#include "model/dropout.hpp"
#include "model/linear.hpp"
#include "model/relu.hpp"
#include "random/seeded_random.hpp"
#include "model/sequential.hpp"
#include "test_support.hpp"

using namespace ap;

namespace {

using namespace ap::test;

std::vector<tensor> grads_of(sequential& m) {
  std::vector<tensor> out;
  for (const parameter& p : m.parameters()) out.push_back(*p.grad);
  return out;
}

std::vector<tensor> values_of(sequential& m) {
  std::vector<tensor> out;
  for (const parameter& p : m.parameters()) out.push_back(*p.value);
  return out;
}

// A small model with every kind of layer that has a backward worth testing.
sequential small_model() {
  sequential m = sequential::from_layer_specs(
      {"linear:6:8", "gelu", "layernorm:8", "dropout:0.25:5", "linear:8:5", "tanh", "linear:5:4", "sigmoid"});
  m.initialize(3);
  return m;
}

const forward_context training{true, 2, 0};

}  // namespace

TEST_CASE("from_spec: Linear layers with the activation between, named by global index") {
  sequential m = sequential::from_spec("20-16-12-5", {"gelu", 1});
  CHECK(m.describe() == "Linear(20->16) GELU Linear(16->12) GELU Linear(12->5)");
  CHECK(m.layer_specs() == std::vector<std::string>{"linear:20:16", "gelu", "linear:16:12", "gelu", "linear:12:5"});
  CHECK(m.in_features() == std::optional<std::size_t>(20));
  CHECK(m.out_features() == std::optional<std::size_t>(5));
  CHECK(m.parameter_count() == 20 * 16 + 16 + 16 * 12 + 12 + 12 * 5 + 5);
  std::vector<std::string> names;
  for (const parameter& p : m.parameters()) names.push_back(p.name);
  CHECK(names == std::vector<std::string>{"0.weight", "0.bias", "2.weight", "2.bias", "4.weight", "4.bias"});
  CHECK_THROWS_AS(sequential::from_spec("20"), std::invalid_argument);
  CHECK_THROWS_AS(sequential::from_spec("20-x-3"), std::invalid_argument);
  CHECK_THROWS_AS(sequential::from_spec("20-3", {"swish", 1}), std::invalid_argument);
}

TEST_CASE("finite differences through a whole Sequential") {
  sequential m = small_model();
  tensor x = random_tensor({3, 6}, 4);
  sequential_cache cache;
  const tensor y = m.forward(x, cache, training);
  const tensor r = random_tensor(shape_of(y), 5);
  m.zero_grad();
  const tensor dx = m.backward(r, cache);
  const auto f = [&] { return objective(m.forward(x, training), r); };
  const auto numeric = [&](tensor& t) {
    tensor g = tensor::from_shape(t.shape());
    const float eps = 3e-3f;
    for (std::size_t i = 0; i < t.size(); ++i) {
      const float saved = t.data()[i];
      t.data()[i] = saved + eps;
      const double plus = f();
      t.data()[i] = saved - eps;
      const double minus = f();
      t.data()[i] = saved;
      g.data()[i] = static_cast<float>((plus - minus) / (2.0 * eps));
    }
    return g;
  };
  CHECK(check_close(dx, numeric(x), 1e-3, 1e-2, "dx"));
  for (const parameter& p : m.parameters()) CHECK(check_close(*p.grad, numeric(*p.value), 1e-3, 1e-2, p.name));
}

TEST_CASE("backward equals backward_input then backward_weight, exactly, need_input_grad=false keeps the grads") {
  sequential whole = small_model();
  sequential split = whole.clone();
  sequential no_dx = whole.clone();
  const tensor x = random_tensor({5, 6}, 6);
  const tensor dy = random_tensor({5, 4}, 7);

  sequential_cache c1, c2, c3;
  whole.forward(x, c1, training);
  split.forward(x, c2, training);
  no_dx.forward(x, c3, training);
  const tensor dx = whole.backward(dy, c1);
  const tensor dx_split = split.backward_input(dy, c2);
  CHECK(c2.dys.size() == split.size());
  split.backward_weight(c2);
  const tensor nothing = no_dx.backward(dy, c3, false);

  CHECK(dx_split == dx);
  CHECK(nothing.size() == 0);
  const auto g = grads_of(whole), gs = grads_of(split), gn = grads_of(no_dx);
  for (std::size_t i = 0; i < g.size(); ++i) {
    CHECK(gs[i] == g[i]);
    CHECK(gn[i] == g[i]);
  }
  CHECK(c1.layers.empty());  // both paths free the cache
  CHECK(c2.layers.empty());
  CHECK(c2.dys.empty());
  CHECK_THROWS_AS(whole.backward(dy, c1), std::invalid_argument);  // a freed cache cannot be reused

  SUBCASE("backward_input with need_input_grad=false, then backward_weight") {
    sequential late = whole.clone();
    late.zero_grad();
    sequential_cache c4;
    late.forward(x, c4, training);
    CHECK(late.backward_input(dy, c4, false).size() == 0);
    late.backward_weight(c4);
    const auto gl = grads_of(late);
    for (std::size_t i = 0; i < g.size(); ++i) CHECK(gl[i] == g[i]);
  }
}

TEST_CASE("two microbatches in flight, backwards in reverse order, sum like two separate passes") {
  sequential pipelined = small_model();
  sequential separate = pipelined.clone();
  const tensor x = random_tensor({7, 6}, 8);
  const tensor dy = random_tensor({7, 4}, 9);
  const forward_context ctx0{true, 2, 0}, ctx1{true, 2, 3};  // rows 0-2 and 3-6 of one batch

  pipelined.zero_grad();
  sequential_cache c0, c1;
  pipelined.forward(slice_rows(x, 0, 3), c0, ctx0);
  pipelined.forward(slice_rows(x, 3, 7), c1, ctx1);
  const tensor dx1 = pipelined.backward(slice_rows(dy, 3, 7), c1);
  const tensor dx0 = pipelined.backward(slice_rows(dy, 0, 3), c0);

  separate.zero_grad();
  sequential_cache c;
  separate.forward(slice_rows(x, 0, 3), c, ctx0);
  const tensor sx0 = separate.backward(slice_rows(dy, 0, 3), c);
  const auto first = grads_of(separate);
  separate.zero_grad();
  separate.forward(slice_rows(x, 3, 7), c, ctx1);
  const tensor sx1 = separate.backward(slice_rows(dy, 3, 7), c);
  const auto second = grads_of(separate);

  CHECK(dx0 == sx0);
  CHECK(dx1 == sx1);
  const auto together = grads_of(pipelined);
  for (std::size_t i = 0; i < together.size(); ++i)
    CHECK(check_close(together[i], first[i] + second[i], 1e-6, 1e-5, pipelined.parameters()[i].name));
}

TEST_CASE("seeded initialisation: same seed same weights, and a slice is the same layers of the whole") {
  const sequential_options options{"relu", 42};
  sequential a = sequential::from_spec("10-8-6-4", options);
  sequential b = sequential::from_spec("10-8-6-4", options);
  sequential c = sequential::from_spec("10-8-6-4", {"relu", 43});
  const auto wa = values_of(a), wb = values_of(b), wc = values_of(c);
  for (std::size_t i = 0; i < wa.size(); ++i) CHECK(wa[i] == wb[i]);
  CHECK(wa[0] != wc[0]);

  sequential part = a.slice(1, 3);  // ReLU, Linear(8->6)
  CHECK(part.first_index() == 1);
  CHECK(part.describe() == "ReLU Linear(8->6)");
  auto params = part.parameters();
  REQUIRE(params.size() == 2);
  CHECK(params[0].name == "2.weight");
  CHECK(*params[0].value == wa[2]);

  part.initialize(99);
  CHECK(*part.parameters()[0].value != wa[2]);
  part.initialize(42);  // initialising the slice alone reproduces the whole model's layers
  CHECK(*part.parameters()[0].value == wa[2]);

  sequential rebuilt = sequential::from_layer_specs(part.layer_specs(), part.first_index());
  rebuilt.initialize(42);
  CHECK(*rebuilt.parameters()[0].value == wa[2]);

  sequential nested = a.slice(2, 5).slice(0, 1);  // first_index composes
  CHECK(nested.first_index() == 2);
  CHECK(nested.parameters()[0].name == "2.weight");

  CHECK_THROWS_WITH_AS(a.slice(3, 2), "slice [3, 2) of a model of 5 layers", std::out_of_range);
  CHECK_THROWS_AS(a.slice(0, 6), std::out_of_range);
}

TEST_CASE("a slice is independent of the model it came from") {
  sequential a = sequential::from_spec("4-3-2");
  sequential part = a.slice(0, 1);
  *part.parameters()[0].value += 1.0f;
  CHECK(*part.parameters()[0].value != *a.parameters()[0].value);
}

TEST_CASE("forward without a cache gives the same output, zero_grad clears every gradient") {
  sequential m = small_model();
  const tensor x = random_tensor({3, 6}, 10);
  sequential_cache cache;
  CHECK(m.forward(x) == m.forward(x, cache, {false, 0, 0}));
  CHECK(m.forward(x, training) == m.forward(x, cache, training));
  m.backward(random_tensor({3, 4}, 11), cache);
  m.zero_grad();
  for (const tensor& g : grads_of(m))
    for (float v : g) CHECK(v == 0.0f);
}

TEST_CASE("add() refuses a layer whose width does not chain, naming both layers") {
  sequential m;
  m.add(std::make_unique<linear>(784, 128));
  CHECK_THROWS_WITH_AS(m.add(std::make_unique<linear>(256, 10)),
                       "layer 1 Linear(256->10) takes 256 features but layer 0 Linear(784->128) gives 128",
                       std::invalid_argument);
  m.add(std::make_unique<relu>());  // element-wise layers pass the width through
  CHECK_THROWS_WITH_AS(m.add(std::make_unique<linear>(256, 10)),
                       "layer 2 Linear(256->10) takes 256 features but layer 0 Linear(784->128) gives 128",
                       std::invalid_argument);
  CHECK(m.size() == 2);

  sequential later = sequential::from_layer_specs({"linear:8:4"}, 5);  // a stage: global indices in messages
  CHECK_THROWS_WITH_AS(later.add(make_layer("layernorm:3")),
                       "layer 6 LayerNorm(3) takes 3 features but layer 5 Linear(8->4) gives 4",
                       std::invalid_argument);
}

TEST_CASE("forward with the wrong input width names the layer and the shape") {
  sequential m;
  m.add(std::make_unique<relu>());
  m.add(std::make_unique<linear>(784, 128));
  sequential_cache cache;
  CHECK_THROWS_WITH_AS(m.forward(zeros({3, 100}), cache, training),
                       "layer 1 Linear(784->128) takes 784 features, got input of shape (3, 100)",
                       std::invalid_argument);
}

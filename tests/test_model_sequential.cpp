// Sequential: the split backward, microbatches in flight, seeded slices, and the errors a user sees.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <stdexcept>
#include <tuple>

#include "model/block.hpp"
#include "model/dropout.hpp"
#include "model/linear.hpp"
#include "model/relu.hpp"
#include "random/seeded_random.hpp"
#include "model/sequential.hpp"
#include "gradient_check.hpp"
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
  const auto numeric = [&](tensor& t) { return numeric_gradient(f, t, 3e-3f); };
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

namespace {

// Throws from one of its three steps (an error a layer can raise at any point), with a text that does not
// start with its describe(): the naming adds "Failing: ".
class failing_layer final : public layer {
 public:
  enum step { in_forward, in_backward_input, in_backward_weight };
  explicit failing_layer(step s) : step_(s) {}
  std::string describe() const override { return "Failing"; }
  tensor forward(const tensor& x, layer_cache&, const forward_context&) const override {
    if (step_ == in_forward) throw std::runtime_error("refuses this");
    return x;
  }
  void backward_input(const tensor& dy, layer_cache&, tensor* dx) const override {
    if (step_ == in_backward_input) throw std::runtime_error("refuses this");
    if (dx) accumulate_elementwise(*dx, shape_of(dy), *this, [&](std::size_t i) { return dy.data()[i]; });
  }
  void backward_weight(const tensor&, layer_cache&) override {
    if (step_ == in_backward_weight) throw std::runtime_error("refuses this");
  }
  std::unique_ptr<layer> clone() const override { return std::make_unique<failing_layer>(*this); }
  std::string spec() const override { return "failing"; }

 private:
  step step_;
};

std::unique_ptr<layer> residual_of(std::unique_ptr<layer> a, std::unique_ptr<layer> b) {
  std::vector<std::unique_ptr<layer>> parts;
  parts.push_back(std::move(a));
  parts.push_back(std::move(b));
  return std::make_unique<block>(std::move(parts), true);
}

// linear:4:4, relu, then `third` at global index first + 2, then linear:4:2.
sequential with_third(std::unique_ptr<layer> third, std::size_t first = 0) {
  sequential m = sequential::from_layer_specs({"linear:4:4", "relu"}, first);
  m.add(std::move(third));
  m.add(make_layer("linear:4:2"));
  m.initialize(1);
  return m;
}

// The error text of one forward + backward_input + backward_weight.
std::string error_of_step(sequential& m, const tensor& x) {
  return error_of([&] {
    sequential_cache cache;
    const tensor y = m.forward(x, cache, training);
    m.backward_input(zeros(shape_of(y)), cache);
    m.backward_weight(cache);
  });
}

}  // namespace

TEST_CASE("an error a layer throws names the layer once, by its global index, in forward and both backward steps") {
  const tensor x = zeros({3, 4});
  for (auto s : {failing_layer::in_forward, failing_layer::in_backward_input, failing_layer::in_backward_weight}) {
    CAPTURE(int(s));
    sequential plain = with_third(std::make_unique<failing_layer>(s), 5);
    CHECK(error_of_step(plain, x) == "layer 7 Failing: refuses this");
    // Inside a block, the sub-layer's index follows the block's; inside a block in a block, both.
    sequential in_block = with_third(residual_of(make_layer("layernorm:4"), std::make_unique<failing_layer>(s)));
    CHECK(error_of_step(in_block, x) == "layer 2.1 Failing: refuses this");
    sequential nested = with_third(
        residual_of(make_layer("tanh"), residual_of(std::make_unique<failing_layer>(s), make_layer("relu"))));
    const std::string m = error_of_step(nested, x);
    CHECK(m == "layer 2.1.0 Failing: refuses this");
    CHECK(count_of(m, "layer") == 1);
  }
  // A layer's own text already starts with its name: it is not repeated.
  sequential m = sequential::from_layer_specs({"relu", "linear:4:3"}, 2);
  CHECK(error_of([&] { m.forward(zeros({2, 5})); }) == "layer 3 Linear(4->3) takes 4 features, got input of shape (2, 5)");
  // A block called on its own names the part.
  auto b = residual_of(make_layer("layernorm:4"), std::make_unique<failing_layer>(failing_layer::in_forward));
  layer_cache cache;
  CHECK_THROWS_WITH_AS(b->forward(x, cache, training), "part 1 Failing: refuses this", layer_error);
}

TEST_CASE("a bfloat16 input or dy is refused naming the layer, both dtypes and the shape") {
  sequential m = sequential::from_layer_specs({"linear:12:16", "relu", "linear:16:4"});
  m.initialize(1);
  const tensor x = random_tensor({8, 12}, 3);
  sequential_cache cache;
  CHECK_THROWS_WITH_AS(m.forward(x.astype(dtype::bfloat16), cache, training),
                       "layer 0 Linear(12->16) takes float32 input, got bfloat16 (8, 12)", std::invalid_argument);
  CHECK_THROWS_WITH_AS(m.check_input(x.astype(dtype::bfloat16)),
                       "layer 0 Linear(12->16) takes float32 input, got bfloat16 (8, 12)", std::invalid_argument);
  CHECK_THROWS_WITH_AS(m.check_input(zeros({8, 10})),
                       "layer 0 Linear(12->16) takes 12 features, got input of shape (8, 10)", std::invalid_argument);
  m.check_input(x);
  const tensor dy = random_tensor({8, 4}, 4).astype(dtype::bfloat16);
  m.forward(x, cache, training);
  CHECK_THROWS_WITH_AS(m.backward_input(dy, cache), "layer 2 Linear(16->4) takes float32 dy, got bfloat16 (8, 4)",
                       std::invalid_argument);
  m.forward(x, cache, training);
  CHECK_THROWS_WITH_AS(m.backward(dy, cache), "layer 2 Linear(16->4) takes float32 dy, got bfloat16 (8, 4)",
                       std::invalid_argument);
  for (const tensor& g : grads_of(m))
    for (float v : g) CHECK(v == 0.0f);  // refused before any layer ran
  // A slice names its layers by their global index; a block on its own names itself.
  sequential later = sequential::from_layer_specs({"layernorm:16", "linear:16:4"}, 3);
  CHECK(error_of([&] { later.forward(zeros({2, 16}, dtype::bfloat16)); }) ==
        "layer 3 LayerNorm(16) takes float32 input, got bfloat16 (2, 16)");
  auto b = make_layer("residual[layernorm:4,linear:4:4]");
  layer_cache c;
  CHECK_THROWS_WITH_AS(b->forward(zeros({2, 4}, dtype::bfloat16), c, training),
                       "Residual(LayerNorm(4) Linear(4->4)) takes float32 input, got bfloat16 (2, 4)",
                       std::invalid_argument);
}

TEST_CASE("rank 3: (batch, sequence, features) keeps rank 3 through every layer and gradient, and equals the rows flattened") {
  sequential m = sequential::from_layer_specs(
      {"linear:6:8", "gelu", "layernorm:8", "residual[layernorm:8,linear:8:8,tanh]", "dropout:0.25:5", "relu",
       "linear:8:5", "sigmoid"});
  m.initialize(3);
  const tensor x = random_tensor({3, 4, 6}, 11);
  const tensor dy = random_tensor({3, 4, 5}, 12);

  // Layer by layer: every output and every input gradient is rank 3 with the expected widths.
  std::vector<layer_cache> caches(m.size());
  std::vector<tensor> inputs;
  tensor h = x;
  for (std::size_t i = 0; i < m.size(); ++i) {
    inputs.push_back(h);
    h = m.at(i).forward(h, caches[i], training);
    INFO("layer " << i << " " << m.at(i).describe() << " gives " << shape_string(h));
    CHECK(h.dimension() == 3);
    CHECK(h.shape()[0] == 3);
    CHECK(h.shape()[1] == 4);
  }
  CHECK(shape_of(h) == shape_t{3, 4, 5});
  tensor d = dy;
  for (std::size_t i = m.size(); i-- > 0;) {
    tensor below;
    m.at(i).backward_input(d, caches[i], &below);
    m.at(i).backward_weight(d, caches[i]);
    INFO("layer " << i << " " << m.at(i).describe() << " dx " << shape_string(below));
    CHECK(shape_of(below) == shape_of(inputs[i]));
    d = std::move(below);
  }
  CHECK(shape_of(d) == shape_t{3, 4, 6});
  for (const parameter& p : m.parameters()) CHECK(shape_of(*p.grad) == shape_of(*p.value));

  // The whole model, on rank 3 and on the same rows flattened to rank 2: the same numbers. (Dropout draws
  // per sample (the first axis), so it runs in inference mode here: the flattened rows are other samples.)
  const forward_context eval{false, 0, 0};
  auto run = [&](const tensor& input, const tensor& grad_out) {
    sequential copy = m.clone();
    copy.zero_grad();
    sequential_cache cache;
    const tensor y = copy.forward(input, cache, eval);
    const tensor dx = copy.backward(grad_out, cache);
    return std::make_tuple(y, dx, grads_of(copy));
  };
  tensor x2 = x, dy2 = dy;
  x2.reshape({12, 6});
  dy2.reshape({12, 5});
  auto [y3, dx3, g3] = run(x, dy);
  auto [y2, dx2, g2] = run(x2, dy2);
  CHECK(shape_of(y3) == shape_t{3, 4, 5});
  CHECK(shape_of(dx3) == shape_t{3, 4, 6});
  y3.reshape({12, 5});
  dx3.reshape({12, 6});
  CHECK(y3 == y2);
  CHECK(dx3 == dx2);
  REQUIRE(g3.size() == g2.size());
  for (std::size_t i = 0; i < g3.size(); ++i) CHECK(g3[i] == g2[i]);
}

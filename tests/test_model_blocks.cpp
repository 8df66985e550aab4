// Blocks and residual blocks against finite differences, their split backward, accumulating dx for every
// layer, typed caches, spec texts and parameter names.
#include <doctest/doctest.h>

#include <stdexcept>

#include "model/block.hpp"
#include "model/layer_registry.hpp"
#include "model/linear.hpp"
#include "random/seeded_random.hpp"
#include "model/sequential.hpp"
#include "gradient_check.hpp"
#include "test_support.hpp"

using namespace ap;
using namespace ap::test;

namespace {

const forward_context training{true, 5, 0};
const char* const mlp_block = "residual[layernorm:6,linear:6:10,gelu,linear:10:6]";

std::unique_ptr<layer> initialized(const std::string& spec, std::uint64_t seed) {
  auto l = make_layer(spec);
  l->initialize(seed);
  return l;
}

}  // namespace

TEST_CASE("finite differences: residual and plain blocks, nested, inputs and parameters") {
  for (const char* spec : {mlp_block, "block[linear:6:7,tanh,linear:7:6]",
                           "residual[block[linear:6:6,sigmoid],residual[layernorm:6,linear:6:6]]",
                           "residual[tanh]"}) {
    CAPTURE(spec);
    auto l = initialized(spec, 3);
    check_layer_gradients(*l, random_tensor({4, 6}, 4), training, 3e-3f);
  }
}

TEST_CASE("blocks: backward_input then backward_weight equals backward, and dx == nullptr keeps the weights") {
  for (const char* spec : {mlp_block, "residual[block[linear:6:6,sigmoid],residual[layernorm:6,linear:6:6]]",
                           "block[dropout:0.3:9,linear:6:6]"}) {
    CAPTURE(spec);
    check_split_equals_full(*initialized(spec, 5), random_tensor({5, 6}, 6), training);
  }
}

TEST_CASE("a block's backward_weight before its backward_input is a clear error") {
  auto l = initialized(mlp_block, 1);
  layer_cache cache;
  const tensor y = l->forward(random_tensor({2, 6}, 2), cache, training);
  CHECK_THROWS_WITH_AS(l->backward_weight(y, cache), doctest::Contains("run backward_input first"), std::invalid_argument);
}

TEST_CASE("Note [dx accumulates]: every layer adds into a set dx, so a residual needs no special case") {
  for (const char* spec : {"linear:6:4", "relu", "gelu", "tanh", "sigmoid", "layernorm:6", "dropout:0.4:3",
                           "sleep:0:0", mlp_block, "block[linear:6:6,relu]"}) {
    CAPTURE(spec);
    auto l = initialized(spec, 7);
    layer_cache cache;
    const tensor x = random_tensor({3, 6}, 8);
    const tensor dy = random_tensor(shape_of(l->forward(x, cache, training)), 9);
    tensor fresh;
    l->backward_input(dy, cache, &fresh);
    const tensor before = random_tensor({3, 6}, 10);
    tensor dx = before;
    l->backward_input(dy, cache, &dx);
    CHECK(check_close(dx, before + fresh, 1e-6, 1e-6, std::string(spec) + " dx"));
    tensor wrong = zeros({3, 5});
    CHECK_THROWS_WITH_AS(l->backward_input(dy, cache, &wrong), doctest::Contains("dx buffer of shape (3, 5)"),
                         std::invalid_argument);
  }
}

TEST_CASE("residual: y = x + f(x), and dx = dy + f's dx") {
  auto r = make_layer("residual[linear:2:2]");
  auto params = r->parameters("");
  *params[0].value = from_values({2, 2}, {1, 2, 3, 4});
  layer_cache cache;
  const tensor y = r->forward(from_values({1, 2}, {1, 1}), cache, training);
  CHECK(y == from_values({1, 2}, {1 + 4, 1 + 6}));
  const tensor dx = r->backward(from_values({1, 2}, {1, 0}), cache);
  CHECK(dx == from_values({1, 2}, {1 + 1, 0 + 3}));  // dy + dy W^T
}

TEST_CASE("typed caches: a cache from another layer kind, or none, is a clear error") {
  auto lin = make_layer("linear:4:4");
  auto ln = make_layer("layernorm:4");
  layer_cache cache;
  const tensor dy = zeros({2, 4});
  CHECK_THROWS_WITH_AS(ln->backward(dy, cache), doctest::Contains("LayerNorm(4) backward: the cache is empty"),
                       std::invalid_argument);
  lin->forward(zeros({2, 4}), cache, training);
  CHECK_THROWS_WITH_AS(ln->backward(dy, cache),
                       doctest::Contains("LayerNorm(4) backward: the cache holds what a forward of another layer kind saved"),
                       std::invalid_argument);
}

TEST_CASE("blocks: spec round-trips, describe, widths, flops summed, parameters named by position") {
  auto b = make_layer(mlp_block);
  CHECK(b->spec() == mlp_block);
  CHECK(b->describe() == "Residual(LayerNorm(6) Linear(6->10) GELU Linear(10->6))");
  CHECK(b->in_features() == std::optional<std::size_t>(6));
  CHECK(b->out_features() == std::optional<std::size_t>(6));
  CHECK(make_layer("residual[tanh,block[linear:3:3]]")->in_features() == std::optional<std::size_t>(3));
  CHECK(b->flops_per_row() == 2.0 * 6 * 10 + 2.0 * 10 * 6);
  std::vector<std::string> names;
  for (const parameter& p : b->parameters("3.")) names.push_back(p.name);
  CHECK(names == std::vector<std::string>{"3.0.gamma", "3.0.beta", "3.1.weight", "3.1.bias", "3.3.weight", "3.3.bias"});
  const std::string nested = "block[relu,residual[linear:4:4,block[tanh]]]";
  CHECK(make_layer(nested)->spec() == nested);
  CHECK(make_layer(nested)->parameters("0.")[0].name == "0.1.0.weight");
}

TEST_CASE("blocks: each sub-layer seeded on its own, deterministically, and clone is deep") {
  auto a = initialized("block[linear:5:5,linear:5:5]", 11);
  auto b = initialized("block[linear:5:5,linear:5:5]", 11);
  auto pa = a->parameters(""), pb = b->parameters("");
  CHECK(*pa[0].value == *pb[0].value);
  CHECK(*pa[0].value != *pa[2].value);  // two same-shaped parts, different weights
  linear alone(5, 5);
  alone.initialize(hash_counters(11, 1));
  CHECK(*alone.parameters("")[0].value == *pa[2].value);
  auto c = a->clone();
  *c->parameters("")[0].value += 1.0f;
  CHECK(*a->parameters("")[0].value == *pb[0].value);
}

TEST_CASE("block spec errors name the text and what is wrong") {
  struct bad { const char* spec; const char* why; };
  for (const bad& e : {bad{"residual[relu", "'[' at 8 is never closed"}, bad{"residual[]", "empty part"},
                       bad{"residual[relu,,gelu]", "empty part before ','"}, bad{"residual[relu]x", "after the closing ']'"},
                       bad{"residual:3[relu]", "expected residual[SPEC,SPEC,...]"}, bad{"block", "expected block[SPEC"},
                       bad{"relu[gelu]", "expected relu"}, bad{"residual[linear:4:5]", "needs f to keep the width"},
                       bad{"block[linear:4:5,linear:6:2]", "part 1 Linear(6->2) takes 6 features but part 0 Linear(4->5) gives 5"},
                       bad{"residual[linear:3]", "in 'residual[linear:3]': bad layer spec 'linear:3'"},
                       bad{"Linear:3:4", "expected a layer kind"}, bad{"linear;3:4", "unexpected ';'"}}) {
    CAPTURE(e.spec);
    const std::string what = error_of([&] { make_layer(e.spec); });
    CHECK(contains(what, e.why));
    CHECK(contains(what, std::string("'") + e.spec + "'"));
  }
}

TEST_CASE("a Sequential of residual blocks: finite differences, slices, microbatches backwards in any order") {
  sequential m = sequential::from_layer_specs({"linear:5:6", mlp_block, mlp_block, "linear:6:3"});
  m.initialize(12);
  CHECK(m.parameters()[2].name == "1.0.gamma");
  CHECK(m.slice(2, 4).parameters()[2].name == "2.1.weight");
  CHECK(m.slice(2, 4).layer_specs() == std::vector<std::string>{mlp_block, "linear:6:3"});

  const tensor x = random_tensor({7, 5}, 13);
  sequential_cache c0, c1, whole_cache;
  sequential pipelined = m.clone(), whole = m.clone();
  pipelined.zero_grad();
  whole.zero_grad();
  const tensor y0 = pipelined.forward(slice_rows(x, 0, 3), c0, training);
  const tensor y1 = pipelined.forward(slice_rows(x, 3, 7), c1, {true, 5, 3});
  const tensor y = whole.forward(x, whole_cache, training);
  const tensor dy = random_tensor(shape_of(y), 14);
  // Microbatch 1 first, and split into I then W for microbatch 0.
  const tensor dx1 = pipelined.backward(slice_rows(dy, 3, 7), c1);
  const tensor dx0 = pipelined.backward_input(slice_rows(dy, 0, 3), c0);
  pipelined.backward_weight(c0);
  const tensor dx = whole.backward(dy, whole_cache);
  CHECK(check_close(dx0, slice_rows(dx, 0, 3), 1e-5, 1e-4, "dx microbatch 0"));
  CHECK(check_close(dx1, slice_rows(dx, 3, 7), 1e-5, 1e-4, "dx microbatch 1"));
  auto pp = pipelined.parameters(), pw = whole.parameters();
  for (std::size_t i = 0; i < pp.size(); ++i) CHECK(check_close(*pp[i].grad, *pw[i].grad, 1e-5, 1e-4, pp[i].name));
}

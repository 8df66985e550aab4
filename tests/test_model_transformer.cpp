// The transformer's layers: token and positional embeddings, causal self-attention and the pre-LN decoder block
// against finite differences (inputs and parameters), their split backward (I + W == B), accumulating dx,
// causality, and their spec texts.
#include <doctest/doctest.h>

#include <stdexcept>

#include "model/attention.hpp"
#include "model/layer_registry.hpp"
#include "model/sequential.hpp"
#include "gradient_check.hpp"
#include "test_support.hpp"

using namespace ap;
using namespace ap::test;

namespace {

const forward_context training{true, 3, 0};
const char* const decoder_block =
    "block[residual[layernorm:8,attention:8:2],residual[layernorm:8,linear:8:32,gelu,linear:32:8]]";

std::unique_ptr<layer> initialized(const std::string& spec, std::uint64_t seed) {
  auto l = make_layer(spec);
  l->initialize(seed);
  return l;
}

// Token ids (batch, sequence) in [0, vocabulary), seeded.
tensor token_ids(std::size_t batch, std::size_t sequence, std::size_t vocabulary, std::uint64_t seed) {
  tensor ids = tensor::from_shape({batch, sequence});
  splitmix64 random(seed);
  for (float& v : ids) v = float(random.next() % vocabulary);
  return ids;
}

}  // namespace

TEST_CASE("finite differences: attention, positional embedding and the decoder block, inputs and parameters") {
  for (const char* spec : {"attention:8:2", "attention:6:1", "position:5:8", decoder_block}) {
    CAPTURE(spec);
    auto l = initialized(spec, 3);
    const std::size_t width = *l->in_features();
    check_layer_gradients(*l, random_tensor({2, 4, width}, 4), training, 3e-3f);
  }
}

TEST_CASE("finite differences: token embedding's table") {
  auto l = initialized("embedding:7:4", 5);
  const tensor ids = token_ids(3, 5, 7, 6);  // some ids repeat: their rows sum the gradients
  layer_cache cache;
  const tensor y = l->forward(ids, cache, training);
  CHECK(shape_of(y) == shape_t{3, 5, 4});
  const tensor r = random_tensor(shape_of(y), 7);
  parameter p = l->parameters("").at(0);
  std::fill(p.grad->begin(), p.grad->end(), 0.0f);
  tensor dx;
  l->backward(r, cache, &dx);
  CHECK(shape_of(dx) == shape_of(ids));  // ids have no gradient: zeros
  for (float v : dx) CHECK(v == 0.0f);
  const auto f = [&] {
    layer_cache scratch;
    return objective(l->forward(ids, scratch, training), r);
  };
  CHECK(check_close(*p.grad, numeric_gradient(f, *p.value, 1e-2f), 2e-3, 1e-2, "dweight"));
}

TEST_CASE("transformer layers: backward_input then backward_weight equals backward, and dx == nullptr keeps the weights") {
  for (const char* spec : {"attention:8:2", "position:4:8", decoder_block}) {
    CAPTURE(spec);
    check_split_equals_full(*initialized(spec, 5), random_tensor({3, 4, 8}, 6), training);
  }
  check_split_equals_full(*initialized("embedding:9:8", 5), token_ids(3, 4, 9, 1), training);
}

TEST_CASE("Note [dx accumulates]: attention and the positional embedding add into a set dx") {
  for (const char* spec : {"attention:8:2", "position:4:8", decoder_block}) {
    CAPTURE(spec);
    auto l = initialized(spec, 7);
    layer_cache cache;
    const tensor x = random_tensor({2, 3, 8}, 8);
    const tensor dy = random_tensor(shape_of(l->forward(x, cache, training)), 9);
    tensor fresh;
    l->backward_input(dy, cache, &fresh);
    const tensor before = random_tensor({2, 3, 8}, 10);
    tensor dx = before;
    l->backward_input(dy, cache, &dx);
    CHECK(check_close(dx, before + fresh, 1e-6, 1e-6, std::string(spec) + " dx"));
  }
}

TEST_CASE("causality: changing a future token never changes an earlier position's output") {
  sequential model = sequential::from_layer_specs(
      {"embedding:11:8", "position:6:8", decoder_block, decoder_block, "layernorm:8", "linear:8:11"});
  model.initialize(4);
  const tensor ids = token_ids(2, 6, 11, 3);
  const tensor y = model.forward(ids);  // (2, 6, 11)
  for (std::size_t changed = 0; changed < 6; ++changed) {
    tensor other = ids;
    other(1, changed) = float((std::size_t(ids(1, changed)) + 1) % 11);
    const tensor z = model.forward(other);
    for (std::size_t b = 0; b < 2; ++b)
      for (std::size_t t = 0; t < 6; ++t) {
        bool same = true;
        for (std::size_t c = 0; c < 11; ++c) same = same && y.data()[(b * 6 + t) * 11 + c] == z.data()[(b * 6 + t) * 11 + c];
        INFO("changed ", changed, " b ", b, " t ", t);
        if (b == 0 || t < changed) CHECK(same);         // other sequence, or an earlier position: bit for bit
        else if (t == changed) CHECK_FALSE(same);       // the changed position itself sees its new token
      }
  }
}

TEST_CASE("causal_softmax_rows: each row sums to 1 over the positions it sees, 0 beyond") {
  tensor s = random_tensor({2, 3, 3}, 1, 3.0f);
  causal_softmax_rows(s.data(), 6, 3);
  for (std::size_t r = 0; r < 6; ++r) {
    double sum = 0.0;
    for (std::size_t j = 0; j < 3; ++j) {
      const float p = s.data()[r * 3 + j];
      if (j > r % 3) CHECK(p == 0.0f);
      sum += p;
    }
    CHECK(sum == doctest::Approx(1.0).epsilon(1e-6));
  }
}

TEST_CASE("transformer layer specs round-trip, and bad ones are clear errors") {
  for (const char* spec : {"embedding:256:64", "position:128:64", "attention:64:4", decoder_block})
    CHECK(make_layer(spec)->spec() == spec);
  CHECK_THROWS_WITH_AS(make_layer("attention:10:4"), doctest::Contains("heads (4) must divide dim (10)"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(make_layer("embedding:256"), doctest::Contains("embedding:VOCABULARY:DIM"), std::invalid_argument);
  auto attention = make_layer("attention:8:2");
  layer_cache cache;
  CHECK_THROWS_WITH_AS(attention->forward(random_tensor({4, 8}, 1), cache, training),
                       doctest::Contains("takes (batch, sequence, 8), got input of shape (4, 8)"), std::invalid_argument);
  auto position = make_layer("position:4:8");
  CHECK_THROWS_WITH_AS(position->forward(random_tensor({1, 5, 8}, 1), cache, training),
                       doctest::Contains("sequence <= 4"), std::invalid_argument);
  auto embedding = make_layer("embedding:5:8");
  CHECK_THROWS_WITH_AS(embedding->forward(from_values({1, 2}, {1, 5}), cache, training),
                       doctest::Contains("token id at (0, 1) is 5"), std::invalid_argument);
  auto names = make_layer(decoder_block)->parameters("2.");
  CHECK(names.at(2).name == "2.0.1.qkv.weight");
  CHECK(names.at(5).name == "2.0.1.proj.bias");
}

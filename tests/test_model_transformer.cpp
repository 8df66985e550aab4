// The transformer's layers: token and positional embeddings, causal self-attention and the pre-LN decoder block
// against finite differences (inputs and parameters), their split backward (I + W == B), accumulating dx,
// causality, and their spec texts.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <vector>

#include "model/attention.hpp"
#include "tensor/compute.hpp"
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

TEST_CASE("causal_softmax_rows matches a double-precision softmax to 1e-6") {
  const std::size_t t = 37;  // not a multiple of the vector width
  tensor s = random_tensor({2, t, t}, 5, 30.0f);  // scores up to +-30: exponents down to -60
  const tensor original = s;
  causal_softmax_rows(s.data(), 2 * t, t);
  double worst = 0.0;
  for (std::size_t r = 0; r < 2 * t; ++r) {
    const float* x = original.data() + r * t;
    const std::size_t seen = r % t + 1;
    double max = x[0], sum = 0.0;
    for (std::size_t j = 1; j < seen; ++j) max = std::max(max, double(x[j]));
    for (std::size_t j = 0; j < seen; ++j) sum += std::exp(double(x[j]) - max);
    for (std::size_t j = 0; j < seen; ++j)
      worst = std::max(worst, std::fabs(double(s.data()[r * t + j]) - std::exp(double(x[j]) - max) / sum));
  }
  CHECK(worst < 1e-6);
}

TEST_CASE("attention in groups of heads (Note [attention in groups]): forward as each head alone in double, backward as finite differences, same bits on 1 to 3 threads") {
  // 3 x 3 heads of 128 positions: groups of 4 heads, the last one partial.
  const std::size_t batch = 3, t = 128, heads = 3, d = 8, width = heads * d;
  const tensor qkv = random_tensor({batch, t, 3 * width}, 41);
  const int saved = compute_threads();
  tensor first;
  for (int threads : {1, 2, 3}) {
    CAPTURE(threads);
    set_compute_threads(threads);
    attention_heads s;
    const tensor out = attention_heads_forward(qkv, heads, dtype::float32, s);
    if (threads == 1) first = out;
    CHECK(out == first);  // bitwise
  }
  set_compute_threads(saved);
  const auto at = [&](std::size_t b, std::size_t i, std::size_t part, std::size_t h, std::size_t j) {
    return double(qkv.data()[(b * t + i) * 3 * width + part * width + h * d + j]);
  };
  double worst = 0.0;
  for (std::size_t b = 0; b < batch; ++b)
    for (std::size_t h = 0; h < heads; ++h)
      for (std::size_t i = 0; i < t; ++i) {
        std::vector<double> p(i + 1);
        double max = -1e300, sum = 0.0;
        for (std::size_t k = 0; k <= i; ++k) {
          double dot = 0.0;
          for (std::size_t j = 0; j < d; ++j) dot += at(b, i, 0, h, j) * at(b, k, 1, h, j);
          p[k] = dot / std::sqrt(double(d));
          max = std::max(max, p[k]);
        }
        for (double& v : p) sum += (v = std::exp(v - max));
        for (std::size_t j = 0; j < d; ++j) {
          double o = 0.0;
          for (std::size_t k = 0; k <= i; ++k) o += p[k] / sum * at(b, k, 2, h, j);
          worst = std::max(worst, std::fabs(o - double(first.data()[(b * t + i) * width + h * d + j])));
        }
      }
  CHECK(worst < 1e-5);
  // The backward, in groups too: the same bits on 1 to 3 threads, and the gradient of sum(out * w) against
  // central differences at sampled inputs.
  const tensor w = random_tensor({batch, t, width}, 42);
  tensor grad_one;
  for (int threads : {1, 2, 3}) {
    CAPTURE(threads);
    set_compute_threads(threads);
    attention_heads s;
    attention_heads_forward(qkv, heads, dtype::float32, s);
    tensor dqkv;
    attention_heads_backward(w, heads, s, dqkv);
    if (threads == 1) grad_one = dqkv;
    CHECK(dqkv == grad_one);  // bitwise
  }
  set_compute_threads(saved);
  const auto loss = [&](const tensor& x) {
    attention_heads s;
    const tensor out = attention_heads_forward(x, heads, dtype::float32, s);
    double sum = 0.0;
    for (std::size_t i = 0; i < out.size(); ++i) sum += double(out.data()[i]) * double(w.data()[i]);
    return sum;
  };
  tensor x = qkv;
  const float eps = 1e-2f;
  for (std::size_t sample = 0; sample < 24; ++sample) {
    const std::size_t i = (sample * 2654435761u) % x.size();
    const float keep = x.data()[i];
    x.data()[i] = keep + eps;
    const double up = loss(x);
    x.data()[i] = keep - eps;
    const double down = loss(x);
    x.data()[i] = keep;
    CAPTURE(i);
    CHECK(grad_one.data()[i] == doctest::Approx((up - down) / (2.0 * eps)).epsilon(2e-2).scale(1.0));
  }
}

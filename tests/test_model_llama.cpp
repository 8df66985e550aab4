// LLaMA-style pieces of the GPT spec: rotary positions and grouped-query attention (Note [rotary positions], Note
// [grouped-query attention] in model/attention.hpp) against attention written out in double and against
// multi-head attention with its k/v heads repeated; the SwiGLU MLP (model/swiglu.hpp) against its formula; all
// against finite differences, in bfloat16 too; the spec keys pos, kv_heads and act, the llama presets, and the
// models they make.
#include <doctest/doctest.h>

#include <cmath>
#include <stdexcept>

#include "gradient_check.hpp"
#include "model/attention.hpp"
#include "model/gpt_spec.hpp"
#include "model/layer_registry.hpp"
#include "model/loss.hpp"
#include "model/sequential.hpp"
#include "model/swiglu.hpp"
#include "random/seeded_random.hpp"
#include "tensor/compute.hpp"
#include "test_support.hpp"

using namespace ap;
using namespace ap::test;

namespace {

const forward_context training{true, 7, 0};

// Causal attention of qkv (B, T, (H + 2K) d) in double: query head h takes kv head h / (H / K); with base > 0, q
// and k rotated first, the pair (i, i + d/2) at position p by the angle p base^(-2i/d) (Hugging Face's
// rotate_half). The heads' outputs (B, T, H d).
std::vector<double> reference_attention(const tensor& qkv, std::size_t heads, std::size_t kv, double base) {
  const std::size_t batch = qkv.shape()[0], t = qkv.shape()[1], width = qkv.shape()[2], d = width / (heads + 2 * kv);
  const std::size_t half = d / 2;
  const auto vector_at = [&](std::size_t b, std::size_t p, std::size_t column, bool rotate) {
    std::vector<double> x(d);
    for (std::size_t j = 0; j < d; ++j) x[j] = double(qkv.data()[(b * t + p) * width + column + j]);
    if (!rotate || base <= 0.0) return x;
    std::vector<double> y(d);
    for (std::size_t i = 0; i < half; ++i) {
      const double angle = double(p) * std::pow(base, -2.0 * double(i) / double(d));
      y[i] = x[i] * std::cos(angle) - x[i + half] * std::sin(angle);
      y[i + half] = x[i + half] * std::cos(angle) + x[i] * std::sin(angle);
    }
    return y;
  };
  std::vector<double> out(batch * t * heads * d);
  for (std::size_t b = 0; b < batch; ++b)
    for (std::size_t h = 0; h < heads; ++h) {
      const std::size_t j = h / (heads / kv);  // the kv head of query head h
      for (std::size_t i = 0; i < t; ++i) {
        const std::vector<double> q = vector_at(b, i, h * d, true);
        std::vector<double> p(i + 1);
        double max = -1e300, sum = 0.0;
        for (std::size_t s = 0; s <= i; ++s) {
          const std::vector<double> k = vector_at(b, s, (heads + j) * d, true);
          double dot = 0.0;
          for (std::size_t c = 0; c < d; ++c) dot += q[c] * k[c];
          p[s] = dot / std::sqrt(double(d));
          max = std::max(max, p[s]);
        }
        for (double& v : p) sum += (v = std::exp(v - max));
        for (std::size_t s = 0; s <= i; ++s) {
          const std::vector<double> v = vector_at(b, s, (heads + kv + j) * d, false);
          for (std::size_t c = 0; c < d; ++c) out[((b * t + i) * heads + h) * d + c] += p[s] / sum * v[c];
        }
      }
    }
  return out;
}

double worst_difference(const tensor& got, const std::vector<double>& expected) {
  REQUIRE(got.size() == expected.size());
  double worst = 0.0;
  for (std::size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::fabs(double(got.data()[i]) - expected[i]));
  return worst;
}

// Parameter `i` of `l`.
tensor& value_of(layer& l, std::size_t i) { return *l.parameters("").at(i).value; }
tensor& grad_of(layer& l, std::size_t i) { return *l.parameters("").at(i).grad; }

// Columns [first, first + n) of the (rows, cols) matrix or vector `from` copied into columns [to, to + n) of `into`.
void copy_columns(const tensor& from, std::size_t first, std::size_t n, tensor& into, std::size_t to) {
  const std::size_t r = from.dimension() == 1 ? 1 : from.shape()[0], c = from.shape().back(), ci = into.shape().back();
  for (std::size_t i = 0; i < r; ++i)
    for (std::size_t j = 0; j < n; ++j) into.data()[i * ci + to + j] = from.data()[i * c + first + j];
}

}  // namespace

TEST_CASE("rotary positions and grouped-query heads: the attention core against attention written out in double") {
  struct shape_case {
    std::size_t batch, t, heads, kv, d;
    double base;
  };
  // t = 128: groups of whole kv heads (Note [attention in groups]), the last one partial, each product on one thread.
  for (const shape_case c : {shape_case{2, 9, 4, 2, 4, 10000.0}, shape_case{2, 9, 4, 4, 6, 100.0},
                             shape_case{1, 7, 6, 1, 4, 0.0}, shape_case{2, 8, 4, 2, 8, 0.0},
                             shape_case{3, 128, 6, 3, 8, 10000.0}, shape_case{2, 128, 8, 2, 4, 500.0}}) {
    CAPTURE(c.t);
    CAPTURE(c.heads);
    CAPTURE(c.kv);
    CAPTURE(c.base);
    const tensor qkv = random_tensor({c.batch, c.t, (c.heads + 2 * c.kv) * c.d}, 3 + c.t + c.heads);
    const head_layout layout{c.heads, c.kv, float(c.base)};
    attention_heads s;
    const tensor out = attention_heads_forward(qkv, layout, dtype::float32, s);
    CHECK(shape_of(out) == shape_t{c.batch, c.t, c.heads * c.d});
    CHECK(shape_of(s.k) == shape_t{c.batch * c.kv, c.t, c.d});  // one k per group of heads, not per head
    CHECK(worst_difference(out, reference_attention(qkv, c.heads, c.kv, c.base)) < 2e-5);
    // In groups (the products each on one thread), the same bits on 1 to 3 threads, forward and backward; a single
    // group's products run on the whole team, whose oneDNN kernels may sum in another order.
    const tensor w = random_tensor(shape_of(out), 5);
    const int saved = compute_threads();
    tensor first_out, first_grad;
    for (int threads : {1, 2, 3}) {
      set_compute_threads(threads);
      attention_heads again;
      const tensor o = attention_heads_forward(qkv, layout, dtype::float32, again);
      tensor dqkv;
      attention_heads_backward(w, layout, again, dqkv);
      if (threads == 1) first_out = o, first_grad = dqkv;
      if (c.t < 128) continue;
      CHECK(o == first_out);
      CHECK(dqkv == first_grad);
    }
    set_compute_threads(saved);
    // The backward against central differences of sum(out * w) at sampled inputs of q, k and v.
    const auto loss = [&](const tensor& x) {
      attention_heads a;
      const tensor o = attention_heads_forward(x, layout, dtype::float32, a);
      double sum = 0.0;
      for (std::size_t i = 0; i < o.size(); ++i) sum += double(o.data()[i]) * double(w.data()[i]);
      return sum;
    };
    tensor x = qkv;
    const float eps = 1e-2f;
    for (std::size_t sample = 0; sample < 30; ++sample) {
      const std::size_t i = (sample * 2654435761u + 17) % x.size();
      const float keep = x.data()[i];
      x.data()[i] = keep + eps;
      const double up = loss(x);
      x.data()[i] = keep - eps;
      const double down = loss(x);
      x.data()[i] = keep;
      CAPTURE(i);
      CHECK(double(first_grad.data()[i]) == doctest::Approx((up - down) / (2.0 * double(eps))).epsilon(1e-2).scale(1.0));
    }
  }
}

TEST_CASE("rotary positions: scores depend on the positions' difference only, and rope changes what plain attention computes") {
  // The same q at every position and the same k at every position: with rope, row i's score for position s is a
  // function of i - s, so the softmax weights of row i over s = 0..i are row i - 1's shifted by one, plus s = 0.
  const std::size_t t = 6, d = 8;
  tensor qkv = tensor::from_shape({1, t, 3 * d});
  const tensor one = random_tensor({3 * d}, 9);
  for (std::size_t p = 0; p < t; ++p)
    for (std::size_t j = 0; j < 3 * d; ++j) qkv.data()[p * 3 * d + j] = one.data()[j];
  attention_heads rotated, plain;
  attention_heads_forward(qkv, head_layout{1, 1, 10000.0f}, dtype::float32, rotated);
  attention_heads_forward(qkv, head_layout{1, 1, 0.0f}, dtype::float32, plain);
  const auto score_ratio = [&](const attention_heads& s, std::size_t i, std::size_t a, std::size_t b) {
    return double(s.probs.data()[i * t + a]) / double(s.probs.data()[i * t + b]);
  };
  for (std::size_t i = 2; i < t; ++i) {
    CAPTURE(i);
    // p(i, i) / p(i, i - 1) depends only on the distances 0 and 1: the same in every row.
    CHECK(score_ratio(rotated, i, i, i - 1) == doctest::Approx(score_ratio(rotated, 1, 1, 0)).epsilon(1e-5));
    CHECK(score_ratio(plain, i, i, i - 1) == doctest::Approx(1.0));  // no positions: equal scores
  }
  CHECK(std::abs(score_ratio(rotated, 1, 1, 0) - 1.0) > 1e-3);
}

TEST_CASE("grouped-query attention is multi-head attention with its k and v heads repeated: outputs and gradients") {
  // 4 heads of width 4 in 2 groups: heads 0, 1 share kv head 0, heads 2, 3 kv head 1.
  for (const char* rope : {"", ":rope=10000"}) {
    CAPTURE(rope);
    auto grouped = make_layer(std::string("attention:16:4:kv_heads=2") + rope);
    auto full = make_layer(std::string("attention:16:4") + rope);
    grouped->initialize(3);
    full->initialize(4);
    CHECK(shape_of(value_of(*grouped, 0)) == shape_t{16, 32});  // q 16, k 8, v 8
    // full's k and v columns of head h: grouped's of kv head h / 2; q, the biases' q part and the projection alike.
    for (std::size_t i : {0u, 1u}) {
      tensor& to = value_of(*full, i);
      const tensor& from = value_of(*grouped, i);
      copy_columns(from, 0, 16, to, 0);
      for (std::size_t h = 0; h < 4; ++h) {
        copy_columns(from, 16 + (h / 2) * 4, 4, to, 16 + h * 4);
        copy_columns(from, 24 + (h / 2) * 4, 4, to, 32 + h * 4);
      }
    }
    value_of(*full, 2) = value_of(*grouped, 2);
    value_of(*full, 3) = value_of(*grouped, 3);
    const tensor x = random_tensor({2, 7, 16}, 5), dy = random_tensor({2, 7, 16}, 6);
    layer_cache cg, cf;
    const tensor yg = grouped->forward(x, cg, training), yf = full->forward(x, cf, training);
    CHECK(check_close(yg, yf, 1e-5, 1e-5, "y"));
    const tensor dxg = grouped->backward(dy, cg), dxf = full->backward(dy, cf);
    CHECK(check_close(dxg, dxf, 1e-5, 1e-5, "dx"));
    // dk and dv of a kv head: the sum of the repeated heads' gradients; dq as it is.
    for (std::size_t i : {0u, 1u}) {
      const tensor& g = grad_of(*grouped, i);
      const tensor& f = grad_of(*full, i);
      tensor expected = tensor::from_shape(shape_of(g));
      expected.fill(0.0f);
      copy_columns(f, 0, 16, expected, 0);
      const std::size_t rows = f.dimension() == 1 ? 1 : f.shape()[0];
      for (std::size_t r = 0; r < rows; ++r)
        for (std::size_t h = 0; h < 4; ++h)
          for (std::size_t j = 0; j < 4; ++j) {
            expected.data()[r * 32 + 16 + (h / 2) * 4 + j] += f.data()[r * 48 + 16 + h * 4 + j];
            expected.data()[r * 32 + 24 + (h / 2) * 4 + j] += f.data()[r * 48 + 32 + h * 4 + j];
          }
      CHECK(check_close(g, expected, 1e-5, 1e-5, i == 0 ? "dqkv.weight" : "dqkv.bias"));
    }
    CHECK(check_close(grad_of(*grouped, 2), grad_of(*full, 2), 1e-5, 1e-5, "dproj.weight"));
  }
}

TEST_CASE("finite differences: attention with kv_heads and rope (biases on and off), the split backward, dx accumulates") {
  for (const char* spec : {"attention:8:4:kv_heads=2:rope=10000", "attention:8:2:kv_heads=1:rope=100:bias=0",
                           "attention:12:3:kv_heads=1", "attention:8:2:rope=10"}) {
    CAPTURE(spec);
    auto a = make_layer(spec);
    a->initialize(8);
    check_layer_gradients(*a, random_tensor({1, 5, a->in_features().value()}, 14, 0.5f), training);
    check_split_equals_full(*a, random_tensor({2, 5, a->in_features().value()}, 15), training);
    // Into a set dx, the fresh gradient is added (Note [dx accumulates]).
    const tensor x = random_tensor({1, 4, a->in_features().value()}, 16), dy = random_tensor(shape_of(x), 17);
    layer_cache c1, c2;
    a->forward(x, c1, training);
    a->forward(x, c2, training);
    const tensor fresh = a->backward(dy, c1);
    tensor dx = random_tensor(shape_of(x), 18);
    const tensor before = dx;
    a->backward(dy, c2, &dx);
    for (std::size_t i = 0; i < dx.size(); ++i) CHECK(dx.data()[i] == doctest::Approx(before.data()[i] + fresh.data()[i]));
  }
  // Without rope its gradient is exactly 0, with rope it is not (Note [key bias]).
  for (const char* spec : {"attention:8:2:kv_heads=1", "attention:8:2:kv_heads=1:rope=10"}) {
    CAPTURE(spec);
    auto a = make_layer(spec);
    a->initialize(2);
    layer_cache c;
    a->forward(random_tensor({2, 5, 8}, 1), c, training);
    a->backward(random_tensor({2, 5, 8}, 2), c);
    const tensor& dbias = grad_of(*a, 1);  // q 8, k 4, v 4
    double key = 0.0;
    for (std::size_t j = 8; j < 12; ++j) key += std::fabs(dbias.data()[j]);
    if (std::string(spec).find("rope") == std::string::npos)
      CHECK(key == 0.0);
    else
      CHECK(key > 1e-4);
  }
}

TEST_CASE("attention's options kv_heads and rope: read back from their text, and bad ones refused naming the text and key") {
  for (const std::string spec : {"attention:16:4:kv_heads=2", "attention:16:4:rope=10000", "attention:16:4:rope=500.5",
                                 "attention:16:4:std=0.02:proj_std=0.01:bias=0:kv_heads=1:rope=10000",
                                 "head_parallel_attention:16:4:kv_heads=2:rope=10000"}) {
    CAPTURE(spec);
    CHECK(make_layer(spec)->spec() == spec);
  }
  CHECK(make_layer("attention:16:4:kv_heads=4")->spec() == "attention:16:4");  // as many kv heads as heads: plain
  CHECK(make_layer("attention:16:4:kv_heads=2:rope=10000")->describe() == "Attention(16, 4 heads, 2 kv heads, rope)");
  CHECK(make_layer("attention:16:4")->describe() == "Attention(16, 4 heads)");
  CHECK(error_of([] { make_layer("attention:16:4:kv_heads=3"); }) ==
        "bad layer spec 'attention:16:4:kv_heads=3': option 'kv_heads' (3) must divide the heads (4)");
  CHECK(error_of([] { make_layer("attention:16:4:kv_heads=0"); }).find("attention:16:4:kv_heads=0") != std::string::npos);
  CHECK(error_of([] { make_layer("attention:12:4:rope=10000"); }) ==
        "bad layer spec 'attention:12:4:rope=10000': option 'rope' needs an even head width, got dim 12 / 4 heads = 3");
  CHECK(error_of([] { make_layer("attention:16:4:rope=0"); }) ==
        "bad layer spec 'attention:16:4:rope=0': option 'rope' must be a positive number (the rotary base), got '0'");
  CHECK(error_of([] { make_layer("attention:16:4:alibi=1"); }) ==
        "bad layer spec 'attention:16:4:alibi=1': unknown option 'alibi' (known: std, proj_std, bias, kv_heads, rope)");
  CHECK(error_of([] { causal_self_attention(16, 4, attention_init{{}, {}, 3, 0.0f}); }) ==
        "Attention needs kv heads dividing the heads, got 4 heads and 3 kv heads");
  // Per row: projections of D (D + 2 K d) and D^2, twice.
  CHECK(make_layer("attention:16:4:kv_heads=2")->flops_per_row() == 2.0 * 16 * (16 + 16) + 2.0 * 16 * 16);
  CHECK(make_layer("attention:16:4")->flops_per_row() == 8.0 * 16 * 16);
}

TEST_CASE("SwiGLU MLP: its formula, finite differences with and without biases, the split backward, dx accumulates") {
  auto l = make_layer("swiglu_mlp:6:5");
  l->initialize(4);
  CHECK(l->describe() == "SwiGLU(6->5->6)");
  const auto params = l->parameters("3.");
  REQUIRE(params.size() == 4);
  CHECK(params[0].name == "3.gate_up.weight");
  CHECK(shape_of(*params[0].value) == shape_t{6, 10});  // the gate's 5 columns, then the up's
  CHECK(params[2].name == "3.down.weight");
  // Biases start at 0: give them values, so the formula below sees them.
  for (std::size_t i : {1u, 3u}) {
    tensor& b = *params[i].value;
    for (std::size_t j = 0; j < b.size(); ++j) b.data()[j] = 0.1f * float(j % 3) - 0.1f;
  }
  const tensor x = random_tensor({2, 3, 6}, 11);
  layer_cache cache;
  const tensor y = l->forward(x, cache, training);
  const tensor &w = *params[0].value, &b = *params[1].value, &wd = *params[2].value, &bd = *params[3].value;
  double worst = 0.0;
  for (std::size_t r = 0; r < 6; ++r) {
    std::vector<double> h(5);
    for (std::size_t u = 0; u < 5; ++u) {
      double g = b.data()[u], up = b.data()[5 + u];
      for (std::size_t i = 0; i < 6; ++i) {
        g += double(x.data()[r * 6 + i]) * w.data()[i * 10 + u];
        up += double(x.data()[r * 6 + i]) * w.data()[i * 10 + 5 + u];
      }
      h[u] = g / (1.0 + std::exp(-g)) * up;  // silu(gate) * up
    }
    for (std::size_t o = 0; o < 6; ++o) {
      double out = bd.data()[o];
      for (std::size_t u = 0; u < 5; ++u) out += h[u] * wd.data()[u * 6 + o];
      worst = std::max(worst, std::fabs(out - double(y.data()[r * 6 + o])));
    }
  }
  CHECK(worst < 1e-5);
  check_layer_gradients(*l, random_tensor({2, 3, 6}, 12), training);
  check_split_equals_full(*l, random_tensor({4, 6}, 13), training);
  auto bare = make_layer("swiglu_mlp:6:5:std=0.5:down_std=0.3:bias=0");
  bare->initialize(5);
  CHECK(bare->parameters("").size() == 2);
  check_layer_gradients(*bare, random_tensor({3, 6}, 14), training);
  // Large gates: silu's limits (0 and the identity) without NaN.
  tensor big = random_tensor({2, 6}, 15, 100.0f);
  layer_cache c;
  const tensor yb = bare->forward(big, c, training);
  const tensor db = bare->backward(random_tensor({2, 6}, 16), c);
  for (float v : yb) CHECK(std::isfinite(v));
  for (float v : db) CHECK(std::isfinite(v));
  // Note [dx accumulates].
  layer_cache c1, c2;
  l->forward(x, c1, training);
  l->forward(x, c2, training);
  const tensor dy = random_tensor(shape_of(x), 17);
  const tensor fresh = l->backward(dy, c1);
  tensor dx = random_tensor(shape_of(x), 18);
  const tensor before = dx;
  l->backward(dy, c2, &dx);
  for (std::size_t i = 0; i < dx.size(); ++i) CHECK(dx.data()[i] == doctest::Approx(before.data()[i] + fresh.data()[i]));
}

TEST_CASE("SwiGLU MLP: options read back, bad specs refused, bfloat16 close to float32 with a bfloat16 stash") {
  for (const std::string spec : {"swiglu_mlp:8:16", "swiglu_mlp:8:16:std=0.02:down_std=0.01:bias=0",
                                 "parallel_swiglu_mlp:8:16:std=0.02:bias=0"}) {
    CAPTURE(spec);
    CHECK(make_layer(spec)->spec() == spec);
  }
  CHECK(error_of([] { make_layer("swiglu_mlp:8"); }).find("expected swiglu_mlp:DIM:HIDDEN") != std::string::npos);
  CHECK(error_of([] { make_layer("swiglu_mlp:8:0"); }).find("swiglu_mlp:8:0") != std::string::npos);
  CHECK(error_of([] { make_layer("swiglu_mlp:8:16:proj_std=1"); }) ==
        "bad layer spec 'swiglu_mlp:8:16:proj_std=1': unknown option 'proj_std' (known: std, down_std, bias)");
  CHECK(tensor_parallel_traits_of("swiglu_mlp").split_kind == "parallel_swiglu_mlp");
  CHECK(make_layer("swiglu_mlp:8:16")->flops_per_row() == 6.0 * 8 * 16);

  auto fp32 = make_layer("swiglu_mlp:16:24"), bf16 = make_layer("swiglu_mlp:16:24");
  fp32->initialize(3);
  bf16->initialize(3);
  bf16->set_compute_dtype(dtype::bfloat16);
  tensor x = random_tensor({4, 16}, 21);
  round_to_compute_dtype(x, dtype::bfloat16);  // a bfloat16 model's activations are bfloat16 values
  const tensor dy = random_tensor({4, 16}, 22);
  layer_cache c32, c16;
  const tensor y32 = fp32->forward(x, c32, training), y16 = bf16->forward(x, c16, training);
  CHECK(check_close(y16, y32, 3e-2, 3e-2, "bf16 y"));
  CHECK(c16.get<swiglu_mlp::saved>(*bf16).a.type() == dtype::bfloat16);
  CHECK(c16.bytes() < c32.bytes());
  const tensor dx32 = fp32->backward(dy, c32), dx16 = bf16->backward(dy, c16);
  CHECK(check_close(dx16, dx32, 5e-2, 5e-2, "bf16 dx"));
  CHECK(check_close(grad_of(*bf16, 0), grad_of(*fp32, 0), 5e-2, 5e-2, "bf16 dgate_up"));
  CHECK(bf16->derived_bytes() > 0);  // its Linears' rounded weights
}

TEST_CASE("gpt spec: pos, kv_heads and act, the text back, and the layers of a LLaMA-style model") {
  const std::string text = "gpt:layers=2,dim=16,heads=4,context=8,vocab=300,bias=0,norm=rms,mlp=24,init=gpt2,pos=rope,"
                           "kv_heads=2,act=swiglu";
  const gpt_config c = parse_gpt_spec(text);
  CHECK(c.pos == "rope");
  CHECK(c.kv_heads == 2);
  CHECK(c.act == "swiglu");
  CHECK(gpt_spec_text(c) == text);
  CHECK(parse_gpt_spec(gpt_spec_text(c)) == c);
  const auto specs = gpt_layer_specs(c);
  REQUIRE(specs.size() == 5);  // embedding, 2 blocks, the final norm, the head: no position layer
  CHECK(specs[0] == "embedding:300:16:std=0.02");
  CHECK(specs[1] == "block[residual[rmsnorm:16,attention:16:4:std=0.02:proj_std=0.01:bias=0:kv_heads=2:rope=10000],"
                    "residual[rmsnorm:16,swiglu_mlp:16:24:std=0.02:down_std=0.01:bias=0]]");
  CHECK(specs[3] == "rmsnorm:16");
  CHECK(specs[4] == "linear:16:300:std=0.02:bias=0");
  CHECK(gpt_layer_specs(parse_gpt_spec("gpt:layers=1,dim=16,heads=4,context=8,kv_heads=1"))[2] ==
        "block[residual[layernorm:16,attention:16:4:kv_heads=1],residual[layernorm:16,linear:16:64,gelu,linear:64:16]]");
  CHECK(gpt_layer_specs(parse_gpt_spec("gpt:layers=1,dim=16,heads=4,context=8,pos=rope"))[1] ==
        "block[residual[layernorm:16,attention:16:4:rope=10000],residual[layernorm:16,linear:16:64,gelu,linear:64:16]]");
  sequential model = sequential::from_spec(text, sequential_options{"relu", 3});
  CHECK(model.layer_specs() == specs);
  tensor tokens = tensor::from_shape({2, 8});
  for (std::size_t i = 0; i < tokens.size(); ++i) tokens.data()[i] = float((i * 37 + 5) % 300);
  const tensor y = model.forward(tokens, forward_context{false, 0, 0});
  CHECK(shape_of(y) == shape_t{2, 8, 300});
  // Defaults and equality: kv_heads = heads and the act's own default width say nothing.
  CHECK(parse_gpt_spec("gpt:dim=16,heads=4,kv_heads=4") == parse_gpt_spec("gpt:dim=16,heads=4"));
  CHECK(gpt_spec_text(parse_gpt_spec("gpt:dim=16,heads=4,kv_heads=4,pos=learned,act=gelu")) ==
        "gpt:layers=8,dim=16,heads=4,context=128");
  CHECK_FALSE(parse_gpt_spec("gpt:dim=16,heads=4,kv_heads=2") == parse_gpt_spec("gpt:dim=16,heads=4"));
  CHECK_FALSE(parse_gpt_spec("gpt:pos=rope") == parse_gpt_spec("gpt"));
  CHECK_FALSE(parse_gpt_spec("gpt:act=swiglu") == parse_gpt_spec("gpt"));
  // act=swiglu's default width is LLaMA's: 8 dim / 3 rounded up to a multiple of 256.
  CHECK(parse_gpt_spec("gpt:dim=4096,heads=32,act=swiglu").mlp_width() == 11008);
  CHECK(parse_gpt_spec("gpt:dim=256,act=swiglu").mlp_width() == 768);
  CHECK(gpt_spec_text(parse_gpt_spec("gpt:dim=256,act=swiglu,mlp=768")) == "gpt:layers=8,dim=256,heads=8,context=128,act=swiglu");
  CHECK(gpt_spec_text(parse_gpt_spec("gpt:dim=256,act=swiglu,mlp=1024")) ==
        "gpt:layers=8,dim=256,heads=8,context=128,mlp=1024,act=swiglu");
  // Every combination reads back from its text.
  for (const char* spec : {"gpt", "gpt:pos=rope", "gpt:kv_heads=2", "gpt:act=swiglu", "gpt:act=swiglu,mlp=1024",
                           "gpt:act=swiglu,mlp=1024,pos=rope,kv_heads=4,norm=rms,bias=0", "llama", "llama-tiny",
                           "llama:kv_heads=12", "llama-tiny:act=gelu,pos=learned", "gpt2:act=swiglu"}) {
    CAPTURE(spec);
    const gpt_config config = parse_gpt_spec(spec);
    CHECK(parse_gpt_spec(gpt_spec_text(config)) == config);
    CHECK(gpt_layer_specs(parse_gpt_spec(gpt_spec_text(config))) == gpt_layer_specs(config));
  }
}

TEST_CASE("gpt spec: the llama presets, and bad values of pos, kv_heads and act refused naming the spec, key and value") {
  const gpt_config t = parse_gpt_spec("llama-tiny");
  CHECK((t.layers == 2 && t.dim == 64 && t.heads == 4 && t.kv_heads == 2 && t.context == 64 && t.mlp_width() == 176));
  CHECK((t.norm == "rms" && t.pos == "rope" && t.act == "swiglu" && !t.bias && t.init == "gpt2" && t.vocabulary == 32000));
  CHECK(gpt_spec_text(t) == "gpt:layers=2,dim=64,heads=4,context=64,vocab=32000,bias=0,norm=rms,mlp=176,init=gpt2,"
                            "pos=rope,kv_heads=2,act=swiglu");
  const gpt_config l = parse_gpt_spec("llama");
  CHECK((l.layers == 12 && l.dim == 768 && l.heads == 12 && l.kv_heads == 4 && l.context == 1024 && l.mlp_width() == 2048));
  CHECK(is_gpt_spec("llama-tiny:vocab=256"));
  CHECK(parse_gpt_spec("llama-tiny:kv_heads=4").kv_width() == 4);
  const auto error = [](const std::string& text) { return error_of([&] { parse_gpt_spec(text); }); };
  CHECK(error("gpt:pos=alibi") == "bad model spec 'gpt:pos=alibi': key 'pos' must be learned or rope, got 'alibi'");
  CHECK(error("gpt:act=relu") == "bad model spec 'gpt:act=relu': key 'act' must be gelu or swiglu, got 'relu'");
  CHECK(error("gpt:kv_heads=0") == "bad model spec 'gpt:kv_heads=0': key 'kv_heads' must be a positive integer, got '0'");
  CHECK(error("gpt:kv_heads=3") == "bad model spec 'gpt:kv_heads=3': key 'kv_heads' (3) must divide key 'heads' (8)");
  CHECK(error("llama:heads=6") == "bad model spec 'llama:heads=6': key 'kv_heads' (4) must divide key 'heads' (6)");
  CHECK(error("gpt:dim=12,heads=4,pos=rope") ==
        "bad model spec 'gpt:dim=12,heads=4,pos=rope': key 'pos' (rope) needs an even head width, got key 'dim' (12) / "
        "key 'heads' (4) = 3");
  CHECK(error("llama-tiny:act=swiglu,act=gelu").find("key 'act' is given twice") != std::string::npos);
}

TEST_CASE("a llama-tiny model: forward, loss near ln(vocabulary), finite differences of a whole block, bfloat16 close") {
  const std::string spec = "llama-tiny:layers=2,dim=16,heads=4,context=8,vocab=300,mlp=24";
  sequential model = sequential::from_spec(spec, sequential_options{"relu", 5});
  CHECK(model.size() == 5);
  tensor ids = tensor::from_shape({3, 8}), labels = tensor::from_shape({3, 8});
  for (std::size_t i = 0; i < ids.size(); ++i) ids.data()[i] = float((i * 53 + 3) % 300), labels.data()[i] = float((i * 29 + 1) % 300);
  const softmax_cross_entropy ce;
  sequential_cache cache;
  const tensor y = model.forward(ids, cache, training);
  CHECK(ce.compute_loss(y, labels) == doctest::Approx(std::log(300.0)).epsilon(0.01));
  model.zero_grad();
  model.backward(ce.compute_gradient(y, labels), cache, false);
  for (const parameter& p : model.parameters()) {
    CAPTURE(p.name);
    double norm = 0.0;
    for (float g : *p.grad) norm += std::fabs(g);
    CHECK(norm > 0.0);  // every parameter gets a gradient
  }
  // A block of its kind (attention with 2 kv heads and rope, the SwiGLU MLP, RMSNorm), narrower, against finite
  // differences.
  auto block = make_layer(gpt_block_spec(parse_gpt_spec("llama-tiny:dim=8,heads=4,mlp=12")));
  block->initialize(6);
  check_layer_gradients(*block, random_tensor({1, 4, 8}, 7, 0.5f), training);
  check_split_equals_full(*block, random_tensor({2, 5, 8}, 8), training);
  sequential bf16 = model.clone();
  bf16.set_compute_dtype(dtype::bfloat16);
  const tensor yb = bf16.forward(ids, forward_context{false, 0, 0});
  CHECK(check_close(yb, model.forward(ids, forward_context{false, 0, 0}), 3e-2, 3e-2, "bf16 logits"));
}

// GPT-2-shaped models: the GPT spec's keys vocab, bias, gelu, norm, mlp and init and the presets (gpt2,
// gpt2-medium, gpt2-tiny); the layers and options they use (RMSNorm, exact GELU, std and bias options of Linear,
// LayerNorm, attention and the embeddings) against finite differences; GPT-2's initialisation (Note [GPT-2
// initialisation]); a vocabulary above 256 end to end in one process, in fp32 and bf16.
#include <doctest/doctest.h>

#include <cmath>
#include <map>
#include <stdexcept>

#include "model/attention.hpp"
#include "model/gelu.hpp"
#include "model/gpt_spec.hpp"
#include "model/layer_norm.hpp"
#include "model/linear.hpp"
#include "model/loss.hpp"
#include "model/rms_norm.hpp"
#include "model/sequential.hpp"
#include "model/spec_text.hpp"
#include "model/tensor_parallel.hpp"
#include "gradient_check.hpp"
#include "test_support.hpp"

using namespace ap;
using namespace ap::test;

namespace {

const forward_context training{true, 7, 0};

// Token ids (batch, sequence) spread over [0, vocabulary), as floats.
tensor token_ids(std::size_t batch, std::size_t sequence, std::size_t vocabulary, std::uint64_t seed) {
  tensor ids = tensor::from_shape({batch, sequence});
  splitmix64 random(seed);
  for (float& v : ids) v = float(random.next() % vocabulary);
  return ids;
}

struct moments {
  double mean = 0.0, std = 0.0;
  std::size_t count = 0;
};

moments moments_of(const std::vector<const tensor*>& tensors) {
  double sum = 0.0, squares = 0.0;
  std::size_t n = 0;
  for (const tensor* t : tensors)
    for (float v : *t) sum += v, squares += double(v) * v, ++n;
  moments m;
  m.count = n;
  m.mean = sum / double(n);
  m.std = std::sqrt(squares / double(n) - m.mean * m.mean);
  return m;
}

}  // namespace

TEST_CASE("RMSNorm: finite differences with a non-trivial weight, the split backward, rows of root mean square 1") {
  rms_norm l(6);
  tensor& w = *l.parameters("")[0].value;
  for (std::size_t i = 0; i < w.size(); ++i) w.data()[i] = 0.5f + 0.1f * float(i);
  check_layer_gradients(l, random_tensor({3, 6}, 5), training);
  check_layer_gradients(l, random_tensor({2, 3, 6}, 6), training);
  check_split_equals_full(l, random_tensor({3, 6}, 7), training);
  rms_norm one(5);
  layer_cache cache;
  const tensor y = one.forward(random_tensor({4, 5}, 8, 3.0f), cache, training);
  for (std::size_t r = 0; r < 4; ++r) {
    double squares = 0.0;
    for (std::size_t i = 0; i < 5; ++i) squares += double(y.data()[r * 5 + i]) * y.data()[r * 5 + i];
    CHECK(squares / 5.0 == doctest::Approx(1.0).epsilon(1e-4));
  }
  CHECK(one.parameters("3.").size() == 1);
  CHECK(one.parameters("3.")[0].name == "3.weight");
  CHECK(make_layer("rmsnorm:8")->spec() == "rmsnorm:8");
  CHECK(make_layer("rmsnorm:8")->describe() == "RMSNorm(8)");
  CHECK(error_of([] { make_layer("rmsnorm:8:bias=0"); }).find("rmsnorm:WIDTH") != std::string::npos);
  // Replicated, not split, under tensor parallelism (as LayerNorm).
  CHECK(tensor_parallel_specs({"rmsnorm:8"}) == std::vector<std::string>{"rmsnorm:8"});
}

TEST_CASE("RMSNorm in bfloat16: the stash in bfloat16, the forward of the float32 input, a close backward") {
  rms_norm f(16), b(16);
  b.set_compute_dtype(dtype::bfloat16);
  tensor x = random_tensor({4, 16}, 9);
  round_to_compute_dtype(x, dtype::bfloat16);
  layer_cache cf, cb;
  const tensor yf = f.forward(x, cf, training), yb = b.forward(x, cb, training);
  CHECK(cb.get<rms_norm::saved>(b).x.type() == dtype::bfloat16);
  CHECK(cb.get<rms_norm::saved>(b).rstd.type() == dtype::float32);
  CHECK(check_close(yb, yf, 0.0, 0.0, "y"));
  const tensor dy = random_tensor({4, 16}, 10);
  CHECK(check_close(b.backward(dy, cb), f.backward(dy, cf), 1e-5, 1e-5, "dx of a bfloat16 x"));
}

TEST_CASE("GELU exact: x Phi(x), finite differences, and its spec beside the tanh form") {
  gelu exact(true);
  check_layer_gradients(exact, random_tensor({3, 5}, 10, 2.0f), training);
  layer_cache cache;
  const tensor y = exact.forward(from_values({3}, {1.0f, -1.0f, 2.5f}), cache, training);
  CHECK(y.data()[0] == doctest::Approx(0.8413447460685429).epsilon(1e-6));
  CHECK(y.data()[1] == doctest::Approx(-0.15865525393145707).epsilon(1e-6));
  CHECK(y.data()[2] == doctest::Approx(2.4844754344662423).epsilon(1e-6));
  layer_cache tanh_cache;
  CHECK(gelu().forward(from_values({1}, {1.0f}), tanh_cache, training).data()[0] ==
        doctest::Approx(0.8411919906082768).epsilon(1e-6));  // the approximation differs
  CHECK(make_layer("gelu:exact")->spec() == "gelu:exact");
  CHECK(make_layer("gelu:exact")->describe() == "GELU(exact)");
  CHECK(make_layer("gelu:tanh")->spec() == "gelu");
  CHECK(make_layer("gelu")->spec() == "gelu");
  CHECK(error_of([] { make_layer("gelu:fast"); }) == "bad layer spec 'gelu:fast': expected gelu, gelu:tanh or gelu:exact");
  CHECK(tensor_parallel_specs({"linear:8:16", "gelu:exact", "linear:16:8"}) ==
        std::vector<std::string>{"column_linear:8:16", "gelu:exact", "row_linear:16:8"});
}

TEST_CASE("Note [layer options]: std and bias of Linear, LayerNorm, attention and the embeddings, read back from their text") {
  for (const std::string spec :
       {"linear:8:4:std=0.02", "linear:8:4:bias=0", "linear:8:4:std=0.5:bias=0", "layernorm:8:bias=0",
        "embedding:10:4:std=0.02", "position:6:4:std=0.01", "attention:8:2:std=0.02:proj_std=0.005:bias=0",
        "attention:8:2:proj_std=0.005", "column_linear:8:6:3:std=0.02:bias=0", "column_linear:8:6:bias=0",
        "row_linear:8:4:std=0.02", "head_parallel_attention:8:2:std=0.02:proj_std=0.005:bias=0"}) {
    CAPTURE(spec);
    CHECK(make_layer(spec)->spec() == spec);
  }
  CHECK(make_layer("linear:8:4:bias=1")->spec() == "linear:8:4");
  CHECK(make_layer("linear:8:4:bias=0")->parameters("").size() == 1);
  CHECK(make_layer("layernorm:8:bias=0")->parameters("").size() == 1);
  CHECK(make_layer("attention:8:2:bias=0")->parameters("").size() == 2);
  CHECK(make_layer("column_linear:8:6:3:bias=0")->parameters("").size() == 1);
  CHECK(make_layer("row_linear:8:4:bias=0")->parameters("").size() == 1);
  CHECK(error_of([] { make_layer("linear:8:4:std=-1"); }) ==
        "bad layer spec 'linear:8:4:std=-1': option 'std' must be a positive number, got '-1'");
  CHECK(error_of([] { make_layer("linear:8:4:bias=2"); }) ==
        "bad layer spec 'linear:8:4:bias=2': option 'bias' must be 0 or 1, got '2'");
  CHECK(error_of([] { make_layer("linear:8:4:init=3"); }) ==
        "bad layer spec 'linear:8:4:init=3': unknown option 'init' (known: std, bias, tie)");
  CHECK(error_of([] { make_layer("linear:8:4:std=1:std=2"); }).find("option 'std' is given twice") != std::string::npos);
  CHECK(error_of([] { make_layer("layernorm:8:std=1"); }).find("unknown option 'std' (known: bias)") != std::string::npos);
  CHECK(error_of([] { make_layer("linear:8:4:std=0.1:7"); }).find("after an option must be KEY=VALUE") != std::string::npos);
  CHECK(error_of([] { make_layer("linear:8:4:5"); }).find("expected linear:IN:OUT") != std::string::npos);
  CHECK(error_of([] { make_layer("attention:8:2:std=x"); }).find("attention:8:2:std=x") != std::string::npos);
}

TEST_CASE("finite differences: Linear, LayerNorm and attention without biases") {
  auto l = make_layer("linear:6:4:std=0.5:bias=0");
  l->initialize(3);
  check_layer_gradients(*l, random_tensor({3, 6}, 11), training);
  layer_norm n(6, /*bias=*/false);
  tensor& gamma = *n.parameters("")[0].value;
  for (std::size_t i = 0; i < gamma.size(); ++i) gamma.data()[i] = 0.7f + 0.1f * float(i);
  check_layer_gradients(n, random_tensor({3, 6}, 12), training);
  check_split_equals_full(n, random_tensor({3, 6}, 13), training);
  auto a = make_layer("attention:8:2:std=0.3:proj_std=0.2:bias=0");
  a->initialize(4);
  check_layer_gradients(*a, random_tensor({2, 3, 8}, 14), training);
}

TEST_CASE("gpt spec: the keys vocab, bias, gelu, norm, mlp and init, the text back, and the layers") {
  const std::string text = "gpt:layers=2,dim=16,heads=2,context=8,vocab=1000,bias=0,gelu=exact,norm=rms,mlp=24,init=gpt2";
  const gpt_config c = parse_gpt_spec(text);
  CHECK(c.vocabulary == 1000);
  CHECK_FALSE(c.bias);
  CHECK(c.gelu == "exact");
  CHECK(c.norm == "rms");
  CHECK(c.mlp_width() == 24);
  CHECK(c.init == "gpt2");
  CHECK(gpt_spec_text(c) == text);
  CHECK(parse_gpt_spec(gpt_spec_text(c)) == c);
  const auto specs = gpt_layer_specs(c);
  REQUIRE(specs.size() == 6);
  CHECK(specs[0] == "embedding:1000:16:std=0.02");
  CHECK(specs[1] == "position:8:16:std=0.02");
  // 0.02 / sqrt(2 x 2 layers) = 0.01 on the projections into the residual stream.
  CHECK(specs[2] == "block[residual[rmsnorm:16,attention:16:2:std=0.02:proj_std=0.01:bias=0],residual[rmsnorm:16,"
                    "linear:16:24:std=0.02:bias=0,gelu:exact,linear:24:16:std=0.01:bias=0]]");
  CHECK(specs[4] == "rmsnorm:16");
  CHECK(specs[5] == "linear:16:1000:std=0.02:bias=0");
  const sequential model = sequential::from_spec(text);
  CHECK(model.layer_specs() == specs);
  CHECK(model.out_features() == 1000u);
  // The defaults keep a plain spec's meaning: mlp = 4 x dim, said or not.
  CHECK(parse_gpt_spec("gpt:dim=16,heads=2,mlp=64") == parse_gpt_spec("gpt:dim=16,heads=2"));
  CHECK(gpt_spec_text(parse_gpt_spec("gpt:dim=16,heads=2,mlp=64,bias=1,gelu=tanh,norm=layer,init=kaiming,vocab=256")) ==
        "gpt:layers=8,dim=16,heads=2,context=128");
  CHECK(gpt_layer_specs(parse_gpt_spec("gpt:layers=1,dim=16,heads=2,context=8,bias=0"))[2] ==
        "block[residual[layernorm:16:bias=0,attention:16:2:bias=0],residual[layernorm:16:bias=0,linear:16:64:bias=0,gelu,"
        "linear:64:16:bias=0]]");
}

TEST_CASE("gpt spec: the presets gpt2, gpt2-medium and gpt2-tiny, and keys overriding theirs") {
  CHECK(gpt_preset_names() == std::vector<std::string>{"gpt2", "gpt2-medium", "gpt2-tiny", "llama", "llama-tiny"});
  const gpt_config g = parse_gpt_spec("gpt2");
  CHECK(g.layers == 12);
  CHECK(g.dim == 768);
  CHECK(g.heads == 12);
  CHECK(g.context == 1024);
  CHECK(g.vocabulary == 50257);
  CHECK(g.mlp_width() == 3072);
  CHECK(g.gelu == "tanh");
  CHECK(g.norm == "layer");
  CHECK(g.bias);
  CHECK(g.init == "gpt2");
  CHECK(gpt_spec_text(g) == "gpt:layers=12,dim=768,heads=12,context=1024,vocab=50257,init=gpt2,tied=1");
  CHECK(parse_gpt_spec(gpt_spec_text(g)) == g);
  const gpt_config m = parse_gpt_spec("gpt2-medium");
  CHECK((m.layers == 24 && m.dim == 1024 && m.heads == 16 && m.context == 1024 && m.vocabulary == 50257));
  const gpt_config t = parse_gpt_spec("gpt2-tiny");
  CHECK((t.layers == 2 && t.dim == 64 && t.heads == 4 && t.context == 64 && t.vocabulary == 50257 && t.init == "gpt2"));
  const gpt_config o = parse_gpt_spec("gpt2:context=256,layers=6");
  CHECK((o.layers == 6 && o.context == 256 && o.dim == 768 && o.vocabulary == 50257 && o.init == "gpt2"));
  CHECK(parse_gpt_spec("gpt2:init=kaiming").init == "kaiming");
  for (const char* spec : {"gpt2", "gpt2-medium", "gpt2-tiny", "gpt2:layers=1", "gpt2-medium:context=8", "gpt2-tiny:vocab=300"})
    CHECK(is_gpt_spec(spec));
  CHECK_FALSE(is_gpt_spec("gpt2-large"));
  CHECK_FALSE(is_gpt_spec("gpt-2"));
  // GPT-2's residual projections: 0.02 / sqrt(24).
  const std::string residual = format_float(float(0.02 / std::sqrt(24.0)));
  const std::string block = gpt_layer_specs(g)[2];
  CHECK(block.find("attention:768:12:std=0.02:proj_std=" + residual + "]") != std::string::npos);
  CHECK(block.find("linear:3072:768:std=" + residual + "]") != std::string::npos);
  CHECK(residual == "0.004082483");  // as docs/models.md writes it
  CHECK(gpt_layer_specs(g).back() == "linear:768:50257:std=0.02:bias=0:tie=0");
}

TEST_CASE("gpt spec: each new key's bad value is refused naming the spec, the key and the value") {
  const auto error = [](const std::string& text) { return error_of([&] { parse_gpt_spec(text); }); };
  CHECK(error("gpt:vocab=0") == "bad model spec 'gpt:vocab=0': key 'vocab' must be a positive integer, got '0'");
  CHECK(error("gpt:bias=2") == "bad model spec 'gpt:bias=2': key 'bias' must be 0 or 1, got '2'");
  CHECK(error("gpt:gelu=fast") == "bad model spec 'gpt:gelu=fast': key 'gelu' must be tanh or exact, got 'fast'");
  CHECK(error("gpt:norm=batch") == "bad model spec 'gpt:norm=batch': key 'norm' must be layer or rms, got 'batch'");
  CHECK(error("gpt:mlp=x") == "bad model spec 'gpt:mlp=x': key 'mlp' must be a positive integer, got 'x'");
  CHECK(error("gpt:init=xavier") == "bad model spec 'gpt:init=xavier': key 'init' must be kaiming or gpt2, got 'xavier'");
  CHECK(error("gpt2:init=gpt2,init=kaiming").find("key 'init' is given twice") != std::string::npos);
  CHECK(error("gpt2:heads=5") == "bad model spec 'gpt2:heads=5': key 'heads' (5) must divide key 'dim' (768)");
  CHECK(error("gpt2-tiny:depth=1").find("unknown key 'depth'") != std::string::npos);
  CHECK(error("gpt2-large").find("a preset (gpt2, gpt2-medium, gpt2-tiny, llama, llama-tiny)") != std::string::npos);
  CHECK_THROWS_WITH_AS(sequential::from_spec("gpt2-tiny:norm=group"), doctest::Contains("key 'norm'"), std::invalid_argument);
}

TEST_CASE("Note [GPT-2 initialisation]: normal(0, 0.02), residual projections 0.02 / sqrt(2 layers), biases 0, norms 1") {
  // 4 layers: the residual projections' std is 0.02 / sqrt(8) = 0.00707.
  const std::string spec = "gpt2-tiny:layers=4,dim=64,heads=4,context=64,vocab=1000";
  sequential model = sequential::from_spec(spec, sequential_options{"relu", 3});
  std::map<std::string, std::vector<const tensor*>> kinds;
  for (const parameter& p : model.parameters()) {
    const std::string& n = p.name;
    const auto ends = [&](const std::string& tail) {
      return n.size() >= tail.size() && n.compare(n.size() - tail.size(), tail.size(), tail) == 0;
    };
    const std::string kind = n == "0.weight"                        ? "token embedding"
                             : n == "1.weight"                      ? "position embedding"
                             : n == "7.weight"                      ? "head"
                             : ends("qkv.weight")                   ? "qkv"
                             : ends("proj.weight")                  ? "attention projection"
                             : ends(".1.1.weight")                  ? "mlp in"
                             : ends(".1.3.weight")                  ? "mlp out"
                             : ends("bias") || ends("beta")         ? "zero"
                             : ends("gamma")                        ? "one"
                                                                    : "unknown " + n;
    kinds[kind].push_back(p.value);
  }
  CHECK(kinds.size() == 9);
  const double residual = 0.02 / std::sqrt(8.0);
  for (const auto& [kind, expected] : std::map<std::string, double>{{"token embedding", 0.02},
                                                                     {"position embedding", 0.02},
                                                                     {"head", 0.02},
                                                                     {"qkv", 0.02},
                                                                     {"mlp in", 0.02},
                                                                     {"attention projection", residual},
                                                                     {"mlp out", residual}}) {
    CAPTURE(kind);
    const moments m = moments_of(kinds.at(kind));
    CAPTURE(m.count);
    // The sample std of n normal draws is off by about std / sqrt(2 n): at least 4096 draws here, under 1.2%.
    CHECK(m.std == doctest::Approx(expected).epsilon(0.05));
    CHECK(std::abs(m.mean) < 4.0 * expected / std::sqrt(double(m.count)));
  }
  for (const tensor* t : kinds.at("zero")) CHECK(moments_of({t}).std == 0.0);
  for (const tensor* t : kinds.at("zero")) CHECK(moments_of({t}).mean == 0.0);
  for (const tensor* t : kinds.at("one")) CHECK((moments_of({t}).mean == 1.0 && moments_of({t}).std == 0.0));
  // Seeded: the same seed gives the same weights, another seed others; a slice (a pipeline's stage) initialised on
  // its own gives the whole model's weights of its layers.
  sequential again = sequential::from_spec(spec, sequential_options{"relu", 3});
  sequential other = sequential::from_spec(spec, sequential_options{"relu", 4});
  CHECK(check_close(*again.parameters()[0].value, *model.parameters()[0].value, 0.0, 0.0, "same seed"));
  CHECK(moments_of({other.parameters()[0].value}).mean != moments_of({model.parameters()[0].value}).mean);
  sequential stage = model.slice(3, 8);
  for (const parameter& p : stage.parameters()) std::fill(p.value->begin(), p.value->end(), 0.0f);
  stage.initialize(3);
  const auto whole = model.parameters();
  const auto part = stage.parameters();
  std::size_t matched = 0;
  for (const parameter& p : part)
    for (const parameter& w : whole)
      if (w.name == p.name) matched += check_close(*p.value, *w.value, 0.0, 0.0, p.name) ? 1 : 0;
  CHECK(matched == part.size());
  // The old initialisation of the same shape: Kaiming-uniform projections, std sqrt(2 / 64) = 0.18.
  sequential old = sequential::from_spec(spec + ",init=kaiming", sequential_options{"relu", 3});
  CHECK(moments_of({old.parameters()[4].value}).std == doctest::Approx(std::sqrt(2.0 / 64.0)).epsilon(0.05));
}

TEST_CASE("a vocabulary of 1000: the embedding's rows and the head's outputs, forward and backward, fp32 and bf16") {
  const std::string spec = "gpt2-tiny:layers=2,dim=16,heads=2,context=8,vocab=1000";
  sequential model = sequential::from_spec(spec, sequential_options{"relu", 5});
  CHECK(model.layer_specs()[0] == "embedding:1000:16:std=0.02");
  CHECK(model.out_features() == 1000u);
  const tensor ids = token_ids(3, 8, 1000, 21), labels = token_ids(3, 8, 1000, 22);
  CHECK(*std::max_element(ids.begin(), ids.end()) > 256.0f);
  const softmax_cross_entropy ce;
  sequential_cache cache;
  const tensor y = model.forward(ids, cache, training);
  CHECK(shape_of(y) == shape_t{3, 8, 1000});
  const float loss = ce.compute_loss(y, labels);
  CHECK(loss == doctest::Approx(std::log(1000.0)).epsilon(0.01));  // small logits at GPT-2's initialisation
  model.zero_grad();
  model.backward(ce.compute_gradient(y, labels), cache, /*need_input_grad=*/false);
  const tensor& dembedding = *model.parameters()[0].grad;  // (1000, 16): rows of the ids used only
  CHECK(shape_of(dembedding) == shape_t{1000, 16});
  for (std::size_t row : {std::size_t(ids.data()[0]), std::size_t(ids.data()[5])}) {
    double norm = 0.0;
    for (std::size_t i = 0; i < 16; ++i) norm += std::abs(dembedding.data()[row * 16 + i]);
    CHECK(norm > 0.0);
  }
  sequential bf16 = model.clone();
  bf16.set_compute_dtype(dtype::bfloat16);
  sequential_cache bcache;
  const tensor yb = bf16.forward(ids, bcache, training);
  CHECK(shape_of(yb) == shape_t{3, 8, 1000});
  CHECK(check_close(yb, y, 2e-2, 2e-2, "bf16 logits"));
  CHECK(ce.compute_loss(yb, labels) == doctest::Approx(loss).epsilon(1e-3));
  bf16.backward(ce.compute_gradient(yb, labels), bcache, false);
  CHECK(error_of([&] { model.forward(from_values({1, 1}, {1000.0f})); }).find("1000") != std::string::npos);
}

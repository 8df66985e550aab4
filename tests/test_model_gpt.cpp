// The GPT model spec (parser, errors naming the key, expansion into layers) and the token-level loss: the mean
// over every token of the whole batch, so unequal microbatches sum to the full-batch loss and gradient.
#include <doctest/doctest.h>

#include <stdexcept>

#include "model/gpt_spec.hpp"
#include "model/loss.hpp"
#include "model/sequential.hpp"
#include "model/text_generation.hpp"
#include "test_support.hpp"

using namespace ap;
using namespace ap::test;

TEST_CASE("gpt spec: keys, defaults, the text back, and the layers") {
  const gpt_config c = parse_gpt_spec("gpt:layers=2,dim=16,heads=2,context=8");
  CHECK(c.layers == 2);
  CHECK(c.dim == 16);
  CHECK(c.heads == 2);
  CHECK(c.context == 8);
  CHECK(c.vocabulary == 256);
  CHECK(gpt_spec_text(c) == "gpt:layers=2,dim=16,heads=2,context=8");
  CHECK(parse_gpt_spec("gpt") == gpt_config{});
  CHECK(parse_gpt_spec("gpt:dim=64,heads=4").layers == 8);
  CHECK(is_gpt_spec("gpt:layers=1"));
  CHECK_FALSE(is_gpt_spec("784-10"));
  CHECK_FALSE(is_gpt_spec("gpt3"));
  CHECK_FALSE(is_gpt_spec("gpt2x:layers=1"));
  const auto specs = gpt_layer_specs(c);
  REQUIRE(specs.size() == 6);
  CHECK(specs[0] == "embedding:256:16");
  CHECK(specs[1] == "position:8:16");
  CHECK(specs[2] == "block[residual[layernorm:16,attention:16:2],residual[layernorm:16,linear:16:64,gelu,linear:64:16]]");
  CHECK(specs[4] == "layernorm:16");
  CHECK(specs[5] == "linear:16:256");
  const sequential model = sequential::from_spec("gpt:layers=2,dim=16,heads=2,context=8");
  CHECK(model.layer_specs() == specs);
  const tensor y = model.forward(from_values({1, 3}, {72, 105, 33}));
  CHECK(shape_of(y) == shape_t{1, 3, 256});
}

TEST_CASE("gpt spec: bad specs are clear errors naming the key") {
  const auto error_of = [](const std::string& text) {
    try {
      parse_gpt_spec(text);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK(error_of("gpt:layers=0") == "bad model spec 'gpt:layers=0': key 'layers' must be a positive integer, got '0'");
  CHECK(error_of("gpt:dim=256,heads=3") == "bad model spec 'gpt:dim=256,heads=3': key 'heads' (3) must divide key 'dim' (256)");
  CHECK(error_of("gpt:depth=3") == "bad model spec 'gpt:depth=3': unknown key 'depth' (known: layers, dim, heads, context, vocab, bias, tied, gelu, norm, mlp, init, pos, kv_heads, act)");
  CHECK(error_of("gpt:dim=-4").find("key 'dim' must be a positive integer, got '-4'") != std::string::npos);
  CHECK(error_of("gpt:dim=4x").find("key 'dim' must be a positive integer") != std::string::npos);
  CHECK(error_of("gpt:dim=4,dim=8").find("key 'dim' is given twice") != std::string::npos);
  CHECK(error_of("gpt:dim").find("'dim' is not KEY=VALUE") != std::string::npos);
  CHECK_THROWS_WITH_AS(sequential::from_spec("gpt:context=0"), doctest::Contains("key 'context'"), std::invalid_argument);
}

TEST_CASE("Note [loss scaling]: token labels (batch, sequence) count every token, unequal microbatches sum to the batch") {
  const softmax_cross_entropy ce;
  const tensor logits = random_tensor({5, 4, 7}, 1, 2.0f);  // (batch, sequence, vocabulary)
  tensor labels = tensor::from_shape({5, 4});
  for (std::size_t i = 0; i < labels.size(); ++i) labels.data()[i] = float((i * 3) % 7);
  CHECK(ce.batch_rows(labels) == 20);
  CHECK(mean_squared_error().batch_rows(logits) == 20);
  // The mean over all 20 tokens, each token's loss computed alone.
  double sum = 0.0;
  for (std::size_t r = 0; r < 20; ++r)
    sum += ce.compute_loss(from_values({1, 7}, std::vector<float>(logits.data() + r * 7, logits.data() + r * 7 + 7)),
                           from_values({1}, {labels.data()[r]}));
  const float whole = ce.compute_loss(logits, labels);
  CHECK(whole == doctest::Approx(sum / 20).epsilon(1e-6));
  const tensor whole_grad = ce.compute_gradient(logits, labels);
  // Microbatches of 2 and 3 sequences, each scaled by the whole batch's rows.
  const std::size_t n = ce.batch_rows(labels);
  const float parts = ce.compute_loss(slice_rows(logits, 0, 2), slice_rows(labels, 0, 2), n) +
                      ce.compute_loss(slice_rows(logits, 2, 5), slice_rows(labels, 2, 5), n);
  CHECK(parts == doctest::Approx(whole).epsilon(1e-6));
  const tensor g0 = ce.compute_gradient(slice_rows(logits, 0, 2), slice_rows(labels, 0, 2), n);
  const tensor g1 = ce.compute_gradient(slice_rows(logits, 2, 5), slice_rows(labels, 2, 5), n);
  CHECK(check_close(g0, slice_rows(whole_grad, 0, 2), 1e-7, 1e-6, "microbatch 0"));
  CHECK(check_close(g1, slice_rows(whole_grad, 2, 5), 1e-7, 1e-6, "microbatch 1"));
}

TEST_CASE("text generation: temperature 0 takes the arg-max, a seed gives the same text, the prompt leads") {
  splitmix64 random(1);
  const std::vector<float> logits{0.1f, 2.0f, -1.0f, 2.0f};
  CHECK(sample_token(logits.data(), 4, 0.0f, random) == 1);
  CHECK(sample_token(logits.data(), 4, 0.01f, random) % 2 == 1);  // one of the two maxima
  std::size_t counts[4] = {0, 0, 0, 0};
  for (int i = 0; i < 4000; ++i) ++counts[sample_token(logits.data(), 4, 1.0f, random)];
  CHECK(counts[2] < counts[0]);  // e^-1 < e^0.1: rarer
  CHECK(counts[0] < counts[1]);
  CHECK_THROWS_AS(sample_token(logits.data(), 4, -1.0f, random), std::invalid_argument);
  const sequential model = sequential::from_spec("gpt:layers=1,dim=8,heads=2,context=4");
  const std::string a = generate_text(model, 4, "Hello", 6, 1.0f, 3);
  CHECK(a.size() == 11);
  CHECK(a.substr(0, 5) == "Hello");
  CHECK(generate_text(model, 4, "Hello", 6, 1.0f, 3) == a);
  CHECK(generate_text(model, 4, "", 3, 0.0f, 3).size() == 3);
}

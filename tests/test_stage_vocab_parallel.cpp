// The vocabulary split over tensor-parallel ranks (Note [vocab-parallel] in model/vocab_parallel.hpp): the
// cross-entropy from each rank's columns of the logits against the whole one, the split embedding against the
// whole one, and a tied language model on a stage of T = 2 and 3 ranks (Note [loss in the last stage]) against
// one rank, at a vocabulary no T here divides.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "collective/local_group.hpp"
#include "collective/shard.hpp"
#include "model/tensor_parallel.hpp"
#include "model/token_embedding.hpp"
#include "model/vocab_parallel.hpp"
#include "stage/stage_compute.hpp"
#include "collective_ranks.hpp"
#include "pipeline_test_models.hpp"
#include "test_support.hpp"

using namespace ap;
using namespace ap::test;

namespace {

constexpr std::size_t vocabulary = 37;

tensor labels_for(std::size_t rows, std::uint64_t seed, shape_t shape = {}, std::size_t classes = vocabulary) {
  tensor y = tensor::from_shape(shape.empty() ? shape_t{rows} : shape);
  for (std::size_t r = 0; r < rows; ++r) y.data()[r] = static_cast<float>((r * 11 + seed) % classes);
  return y;
}

}  // namespace

TEST_CASE("vocab-parallel cross-entropy over T = 1, 2 and 3 ranks equals the whole softmax cross-entropy") {
  const tensor logits = random_tensor({10, vocabulary}, 5, 4.0f);
  const tensor labels = labels_for(10, 3);
  const softmax_cross_entropy whole;
  const auto expected = whole.compute_loss_and_gradient(logits, labels, 16);
  for (int T : {1, 2, 3}) {
    CAPTURE(T);
    local_group group("vocab", T);
    std::vector<float> losses(static_cast<std::size_t>(T));
    std::vector<tensor> gradients(static_cast<std::size_t>(T));
    on_every_rank(group, [&](process_group& g) {
      const auto [first, last] = shard_rows(vocabulary, static_cast<std::size_t>(T), static_cast<std::size_t>(g.rank()));
      tensor mine = tensor::from_shape({10, last - first});
      for (std::size_t r = 0; r < 10; ++r)
        for (std::size_t c = first; c < last; ++c) mine.data()[r * (last - first) + c - first] = logits.data()[r * vocabulary + c];
      auto result = vocab_parallel_cross_entropy(std::move(mine), first, vocabulary, labels, 16, g);
      losses[static_cast<std::size_t>(g.rank())] = result.loss;
      gradients[static_cast<std::size_t>(g.rank())] = std::move(result.gradient);
    });
    std::vector<const tensor*> pieces;
    for (const tensor& g : gradients) pieces.push_back(&g);
    for (float l : losses) CHECK(l == doctest::Approx(expected.loss).epsilon(1e-6));
    CHECK(losses == std::vector<float>(static_cast<std::size_t>(T), losses[0]));  // the same bits on every rank
    CHECK(check_close(gather_pieces(pieces, shard_layout{1}), expected.gradient, 1e-6, 1e-5, "gradient"));
  }
}

TEST_CASE("vocab-parallel cross-entropy: a NaN on one rank fails every rank, a bad label is named") {
  local_group group("vocab", 2);
  std::vector<std::string> errors(2);
  test::on_every_rank(2, [&](int r) {
    tensor mine = random_tensor({3, 5}, 9 + r);
    if (r == 1) mine.data()[7] = std::numeric_limits<float>::quiet_NaN();
    errors[static_cast<std::size_t>(r)] = error_of([&] {
      vocab_parallel_cross_entropy(std::move(mine), static_cast<std::size_t>(r) * 5, 10, labels_for(3, 0, {}, 10), 0,
                                   *group.member(r));
    });
  });
  for (const auto& e : errors) CHECK(contains(e, "the loss of row 1 is not finite"));
  tensor bad = labels_for(3, 0, {}, 10);
  bad.data()[2] = 10.0f;
  local_group one("one", 1);
  const std::string refused =
      error_of([&] { vocab_parallel_cross_entropy(random_tensor({3, 10}, 1), 0, 10, bad, 0, *one.member(0)); });
  CHECK_MESSAGE(contains(refused, "row 2 has label 1e+01, not a class index in [0, 10)"), refused);
}

TEST_CASE("vocab-parallel embedding over T = 2 and 3 ranks: the whole embedding's output and each rank's rows of its gradient") {
  token_embedding whole(vocabulary, 6, 0.02f);
  whole.initialize(17);
  const tensor ids = labels_for(12, 4, {3, 4});
  layer_cache cache;
  const tensor y = whole.forward(ids, cache, {});
  const tensor dy = random_tensor({3, 4, 6}, 2);
  whole.backward_weight(dy, cache);
  const tensor& table_grad = *whole.parameters("").front().grad;
  for (int T : {2, 3}) {
    CAPTURE(T);
    local_group group("vocab", T);
    on_every_rank(group, [&](process_group& g) {
      vocab_parallel_embedding mine(vocabulary, 6, 0.02f);
      mine.join_group(group.member(g.rank()));
      mine.initialize(17);
      layer_cache c;
      const tensor out = mine.forward(ids, c, {});
      CHECK(check_close(out, y, 0.0, 0.0, "output"));  // one non-zero addend a row: exact
      mine.backward_weight(dy, c);
      const auto [first, last] = shard_rows(vocabulary, static_cast<std::size_t>(T), static_cast<std::size_t>(g.rank()));
      CHECK(check_close(*mine.parameters("").front().grad, slice_rows(table_grad, first, last), 0.0, 0.0, "table gradient"));
      CHECK(mine.spec() == "vocab_embedding:37:6:std=0.02");
    });
  }
}

TEST_CASE("a tied language model on a stage of T = 2 and 3 ranks, its vocabulary split and its loss computed there, "
          "trains as one rank") {
  const std::vector<std::string> specs = {"embedding:37:12:std=0.02", "layernorm:12", "linear:12:24", "gelu",
                                          "linear:24:12", "layernorm:12", "linear:12:37:std=0.02:bias=0:tie=0"};
  REQUIRE(splits_vocabulary(specs, "cross_entropy", 2));
  CHECK_FALSE(splits_vocabulary(specs, "mse", 2));
  CHECK_FALSE(splits_vocabulary(specs, "cross_entropy", 1));
  CHECK_FALSE(splits_vocabulary({"linear:8:16", "relu", "linear:16:10"}, "cross_entropy", 2));
  sequential model = sequential::from_layer_specs(specs);
  model.initialize(11);
  const tensor ids = labels_for(24, 1, {4, 6}), next = labels_for(24, 2, {4, 6});
  const auto chunk = [&] {
    std::vector<sequential> c;
    c.push_back(model.slice(0, model.size()));
    return c;
  };
  const softmax_cross_entropy ce;
  for (int T : {2, 3}) {
    CAPTURE(T);
    stage_compute split(0, {0}, chunk(), adam_optimizer(), T);
    split.split_vocabulary(0);
    CHECK(contains(split.split_layers(), "0 vocab_embedding:37:12"));
    CHECK(contains(split.split_layers(), "6 column_linear:12:37:std=0.02:bias=0:tie=0:vocab=1"));
    stage_compute whole(0, {0}, chunk(), adam_optimizer(), 1);
    for (std::uint64_t step = 0; step < 3; ++step) {
      // Two microbatches of the batch's 24 tokens, as the pipeline would feed them.
      for (int mb = 0; mb < 2; ++mb) {
        const tensor x = slice_rows(ids, mb * 2, mb * 2 + 2), y = slice_rows(next, mb * 2, mb * 2 + 2);
        auto expected = ce.take_loss_and_gradient(whole.forward(step, mb, 0, mb * 2, x), y, 24);
        const float share = split.forward_loss(step, mb, 0, mb * 2, x, y, 24);
        CHECK(share == doctest::Approx(expected.loss).epsilon(1e-5));
        whole.backward(mb, 0, expected.gradient);
        split.backward(mb, 0, tensor{});
      }
      whole.apply_optimizer();
      split.apply_optimizer();
    }
    const named_tensors a = whole.whole_parameters(), b = split.whole_parameters();
    REQUIRE(a.names == b.names);
    for (std::size_t i = 0; i < a.names.size(); ++i) CHECK(check_close(b.values[i], a.values[i], 1e-5, 1e-4, a.names[i]));
    // The two tied copies are still each other's transposes, whole.
    const auto value = [&](const std::string& name) {
      return b.values[static_cast<std::size_t>(std::find(b.names.begin(), b.names.end(), name) - b.names.begin())];
    };
    tensor transposed = zeros({37, 12});
    add_tied(transposed, value("6.weight"));
    CHECK(check_close(transposed, value("0.weight"), 0.0, 0.0, "tied copies"));
  }
}

// bfloat16 training end to end (Note [compute dtype] in model/layer.hpp): a pipeline in bf16 gives exactly
// (bit for bit) the parameters of the same model trained in bf16 in one process, on every schedule and
// several stage counts, in one process and on 2 nodes; activations stash and travel in bf16; bf16 training
// tracks fp32.
//
// Note [bitwise pipeline == single process in bf16]: the single-process reference here runs the same
// microbatches (plan/microbatches.hpp) one after another on one compute thread, forward then backward each,
// so every parameter gradient sums the same microbatch products in the same order as the stages do (every
// schedule runs a stage's backwards in microbatch order), on the same GEMM shapes with the same thread count
// (oneDNN gives the same bits for the same problem). Stage boundaries change nothing: values crossing a
// layer boundary are rounded to bfloat16 in both (Note [compute dtype]), and a bfloat16 tensor on the wire
// holds exactly those values. So the parameters agree bit for bit: no tolerance. (Against a full-batch
// step, the fp32 sums of the weight gradients group rows differently, the rounding to bfloat16 can then
// flip in a last bit somewhere, and the tests of test_pipeline_equivalence.cpp, in fp32, allow 1e-5.)
#include <doctest/doctest.h>

#include "actors/pipeline.hpp"
#include "data/text_corpus.hpp"
#include "equivalence.hpp"
#include "model/loss.hpp"
#include "cli_runs.hpp"
#include "node_process.hpp"
#include "pipeline_test_models.hpp"
#include "plan/microbatches.hpp"
#include "tensor/batched_matmul.hpp"
#include "tensor/compute.hpp"
#include "test_support.hpp"

using namespace ap;

namespace {

constexpr int steps = 3;
using model_factory = sequential (*)(std::uint64_t);

using test::run_result;

// The reference of Note [bitwise pipeline == single process in bf16].
run_result train_microbatched(model_factory make, dtype type, const dataset& d, const optimizer_config& opt,
                              int microbatches) {
  // forward_context.first_sample counts samples (rows of the first axis), as the coordinator's does.
  set_compute_threads(1);
  run_result r{make(7), {}};
  r.model.set_compute_dtype(type);
  auto optim = make_optimizer(opt);
  const auto loss = make_loss("cross_entropy");
  const std::size_t batch = loss->batch_rows(d.labels);  // as the coordinator: Note [loss scaling]
  for (int s = 0; s < steps; ++s) {
    r.model.zero_grad();
    double total = 0.0;
    for (const microbatch_range& mb : split_batch(d.inputs, d.labels, microbatches)) {
      const tensor x = slice_rows(d.inputs, mb.begin, mb.end), labels = slice_rows(d.labels, mb.begin, mb.end);
      sequential_cache cache;
      const tensor y = r.model.forward(x, cache, forward_context{true, static_cast<std::uint64_t>(s), mb.begin});
      total += loss->compute_loss(y, labels, batch);
      r.model.backward(loss->compute_gradient(y, labels, batch), cache, false);
    }
    optim->step(r.model.parameters());
    r.losses.push_back(total);
  }
  return r;
}

run_result train_pipeline(model_factory make, const dataset& d, const pipeline_options& o) {
  pipeline pipe(make(7), o);
  run_result r;
  for (int s = 0; s < steps; ++s) r.losses.push_back(pipe.train_step(d.inputs, d.labels, s));
  r.model = pipe.gather_model();
  return r;
}

// Parameters bit for bit (Note [bitwise pipeline == single process in bf16]), losses within 1e-6.
void check_bitwise(run_result& reference, run_result& piped, const std::string& label) {
  test::check_same_run(piped, reference, 0.0f, 1e-6, label);
}

optimizer_config adam() {
  optimizer_config opt;
  opt.kind = "adam";
  opt.lr = 0.01f;
  return opt;
}

struct setup {
  std::string schedule;
  int stages, chunks, microbatches;
};

std::string name_of(const setup& u) {
  return u.schedule + " p=" + std::to_string(u.stages) + " v=" + std::to_string(u.chunks) + " m=" +
         std::to_string(u.microbatches);
}

pipeline_options options_for(const setup& u, dtype type) {
  pipeline_options o = test::pipeline_options_for(u.stages, u.microbatches, u.schedule, u.chunks, adam());
  o.compute_dtype = type;
  return o;
}

}  // namespace

TEST_CASE("bf16: a pipeline equals the same model in bf16 in one process, bit for bit, on every schedule") {
  const dataset d = test::small_blobs(30);
  for (model_factory make : {model_factory{test::nine_layer_model}, model_factory{test::residual_block_model}})
    for (const setup& u : {setup{"gpipe", 2, 1, 4}, setup{"gpipe", 4, 1, 3}, setup{"1f1b", 3, 1, 8},
                           setup{"1f1b", 4, 1, 4}, setup{"zb-h1", 2, 1, 4}, setup{"zb-h1", 3, 1, 3},
                           setup{"interleaved", 2, 2, 4}}) {
      run_result reference = train_microbatched(make, dtype::bfloat16, d, adam(), u.microbatches);
      run_result piped = train_pipeline(make, d, options_for(u, dtype::bfloat16));
      check_bitwise(reference, piped, name_of(u));
    }
}

// The GPT of test_pipeline_gpt.cpp: embeddings, attention (q, k, v and probs held in bf16), LayerNorm, GELU.
sequential tiny_gpt(std::uint64_t seed) {
  return sequential::from_spec("gpt:layers=2,dim=16,heads=2,context=8", sequential_options{"relu", seed});
}

TEST_CASE("bf16: a GPT in a pipeline equals the same GPT in bf16 in one process, bit for bit") {
  const std::string text = "It is a truth universally acknowledged, that a single man in possession of a good fortune, "
                           "must be in want of a wife.";
  const dataset d = text_windows(std::vector<std::uint8_t>(text.begin(), text.end()), 8, 10, 3, "text");
  for (const setup& u : {setup{"1f1b", 3, 1, 3}, setup{"zb-h1", 2, 1, 4}, setup{"interleaved", 3, 2, 3}}) {
    run_result reference = train_microbatched(tiny_gpt, dtype::bfloat16, d, adam(), u.microbatches);
    run_result piped = train_pipeline(tiny_gpt, d, options_for(u, dtype::bfloat16));
    check_bitwise(reference, piped, "gpt " + name_of(u));
  }
  // bf16 and fp32 GPTs differ, a little.
  run_result fp32 = train_microbatched(tiny_gpt, dtype::float32, d, adam(), 3);
  run_result bf16 = train_microbatched(tiny_gpt, dtype::bfloat16, d, adam(), 3);
  CHECK(fp32.losses.back() != bf16.losses.back());
  CHECK(std::abs(fp32.losses.back() - bf16.losses.back()) < 0.02 * fp32.losses.back());
}

// LLaMA-style: rotary positions and grouped-query heads (q, k, v held in bf16), the SwiGLU MLP (its gate and up
// outputs held in bf16), RMSNorm, no biases, no position layer.
sequential tiny_llama(std::uint64_t seed) {
  return sequential::from_spec("llama-tiny:layers=2,dim=16,heads=4,context=8,vocab=256,mlp=24",
                               sequential_options{"relu", seed});
}

TEST_CASE("bf16: a LLaMA-style GPT in a pipeline equals the same model in bf16 in one process, bit for bit") {
  const std::string text = "It is a truth universally acknowledged, that a single man in possession of a good fortune, "
                           "must be in want of a wife.";
  const dataset d = text_windows(std::vector<std::uint8_t>(text.begin(), text.end()), 8, 10, 3, "text");
  for (const setup& u : {setup{"1f1b", 2, 1, 3}, setup{"zb-h1", 2, 1, 4}, setup{"interleaved", 2, 2, 4}}) {
    run_result reference = train_microbatched(tiny_llama, dtype::bfloat16, d, adam(), u.microbatches);
    run_result piped = train_pipeline(tiny_llama, d, options_for(u, dtype::bfloat16));
    check_bitwise(reference, piped, "llama " + name_of(u));
  }
  run_result fp32 = train_microbatched(tiny_llama, dtype::float32, d, adam(), 3);
  run_result bf16 = train_microbatched(tiny_llama, dtype::bfloat16, d, adam(), 3);
  CHECK(fp32.losses.back() != bf16.losses.back());
  CHECK(std::abs(fp32.losses.back() - bf16.losses.back()) < 0.02 * fp32.losses.back());
}

TEST_CASE("bf16 is not fp32: the same pipeline in fp32 ends elsewhere, and bf16 stashes half the bytes") {
  const dataset d = test::small_blobs(30);
  const setup u{"gpipe", 2, 1, 4};
  run_result bf16 = train_pipeline(test::nine_layer_model, d, options_for(u, dtype::bfloat16));
  run_result fp32 = train_pipeline(test::nine_layer_model, d, options_for(u, dtype::float32));
  const auto a = test::parameter_values(bf16.model), b = test::parameter_values(fp32.model);
  float worst = 0.0f;
  for (const auto& [name, value] : a) {
    CHECK(value.type() == dtype::float32);  // master weights stay float32
    worst = std::max(worst, max_relative_difference(value, b.at(name)));
  }
  CHECK(worst > 0.0f);    // bf16 changed the numbers ...
  CHECK(worst < 0.05f);   // ... by a little after three steps

  // Peak stash bytes: GPipe holds all 4 microbatches on each stage. LayerNorm's statistics and the
  // dropout's flags aside, everything halves.
  pipeline_options o = options_for(u, dtype::float32);
  pipeline p32(test::nine_layer_model(7), o);
  p32.train_step(d.inputs, d.labels, 0);
  o.compute_dtype = dtype::bfloat16;
  pipeline p16(test::nine_layer_model(7), o);
  p16.train_step(d.inputs, d.labels, 0);
  const auto b32 = p32.last_peak_stash_bytes(), b16 = p16.last_peak_stash_bytes();
  REQUIRE(b32.size() == 2);
  REQUIRE(b16.size() == 2);
  for (std::size_t s = 0; s < 2; ++s) {
    INFO("stage " << s << ": fp32 " << b32[s] << " bytes, bf16 " << b16[s]);
    CHECK(b32[s] > 0);
    CHECK(b16[s] < b32[s]);
    CHECK(b16[s] * 10 <= b32[s] * 6);  // at most 60%: only rows-sized statistics stay float32
  }
  // Stage 1 holds linear:16:16, relu, linear:16:4 (whole blocks): they stash x (4 microbatches, 30 rows in
  // all, 16 features), y, x: 3 x 30 x 16 elements, 4 bytes each in fp32, 2 in bf16.
  CHECK(b32[1] == 3u * 30u * 16u * 4u);
  CHECK(b16[1] == 3u * 30u * 16u * 2u);
}

TEST_CASE("bf16: a pipeline on 2 nodes equals the same model in bf16 in one process, bit for bit") {
  test::node_process first(test::actorpipe), second(test::actorpipe);
  const dataset d = test::small_blobs(30);
  for (const setup& u : {setup{"1f1b", 2, 1, 4}, setup{"zb-h1", 4, 1, 3}}) {
    const pipeline_options o =
        test::on_nodes(options_for(u, dtype::bfloat16), {first.address(), second.address()}, test::tls_security());
    run_result reference = train_microbatched(test::residual_block_model, dtype::bfloat16, d, adam(), u.microbatches);
    run_result piped = train_pipeline(test::residual_block_model, d, o);
    check_bitwise(reference, piped, name_of(u) + " on 2 nodes");
  }
}

TEST_CASE("bf16 training tracks fp32 on a small problem") {
  // Blobs of 4 classes, 240 samples, 40 steps of Adam: both learn them, and their losses stay close.
  const dataset d = make_blobs(240, 12, 4, 9);
  const auto make = [] {
    sequential m = sequential::from_spec("12-64-64-4", sequential_options{"gelu", 3});
    return m;
  };
  std::vector<double> losses[2];
  double accuracy[2];
  for (int k = 0; k < 2; ++k) {
    set_compute_threads(1);
    sequential m = make();
    m.set_compute_dtype(k == 0 ? dtype::float32 : dtype::bfloat16);
    local_runner runner(m, adam());
    for (int s = 0; s < 40; ++s) losses[k].push_back(runner.train_step(d.inputs, d.labels, s));
    accuracy[k] = static_cast<double>(count_correct(m.forward(d.inputs), d.labels)) / 240.0;
  }
  INFO("fp32 loss " << losses[0].front() << " -> " << losses[0].back() << ", accuracy " << accuracy[0]);
  INFO("bf16 loss " << losses[1].front() << " -> " << losses[1].back() << ", accuracy " << accuracy[1]);
  CHECK(losses[0].back() < 0.5 * losses[0].front());
  CHECK(losses[1].back() < 0.5 * losses[1].front());
  for (int s = 0; s < 40; ++s) {
    INFO("step " << s);
    CHECK(std::abs(losses[1][s] - losses[0][s]) <= 0.03 * losses[0][s] + 0.01);
  }
  CHECK(std::abs(accuracy[1] - accuracy[0]) <= 0.02);
}

TEST_CASE("bf16 batched products (attention's): oneDNN equals the reference, exact products summed in fp32") {
  if (!onednn_available()) return;
  const std::size_t batch = 3, m = 5, n = 7, k = 9;
  const tensor a = test::random_tensor({batch, m, k}, 1).astype(dtype::bfloat16);
  const tensor b = test::random_tensor({batch, n, k}, 2).astype(dtype::bfloat16);
  for (bool ta : {false, true}) {
    tensor c1 = zeros({batch, m, n}), c2 = zeros({batch, m, n});
    // A stored (k, m) per batch when transposed: the same elements read the other way, fine for a comparison.
    batched_gemm_onednn(ta, true, batch, m, n, k, 0.5f, a.bf16_data(), b.bf16_data(), 0.0f, c1.data());
    batched_gemm_reference(ta, true, batch, m, n, k, 0.5f, a.bf16_data(), b.bf16_data(), 0.0f, c2.data());
    INFO("transpose_a " << ta);
    CHECK(max_relative_difference(c1, c2) < 1e-5f);
  }
}

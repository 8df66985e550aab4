// A GPT through the pipeline: every schedule (GPipe, 1F1B, ZB-H1, interleaved) on 1..4 stages with unequal
// microbatches, every partition method, and stages on 2 `actorpipe node` processes give the parameters of
// single-process training (losses within 1e-5, weights within weight_tolerance), LLaMA-style models too; a GPT
// checkpoint resumes and reshards to another stage count.
#include <doctest/doctest.h>

#include "actors/data_parallel_pipeline.hpp"
#include "data/text_corpus.hpp"
#include "equivalence.hpp"
#include "model/gpt_spec.hpp"
#include "random/seeded_random.hpp"
#include "training/trainer.hpp"
#include "cli_runs.hpp"
#include "node_process.hpp"
#include "plan/partition.hpp"
#include "pipeline_test_models.hpp"
#include "test_support.hpp"

using namespace ap;

namespace {

using test::token_batch;

const char* const tiny_gpt = "gpt:layers=2,dim=16,heads=2,context=8";  // 6 elements: 4 stages, or 3 x 2 chunks
constexpr int steps = 3;
// Microbatches sum a weight's gradient in another order than the whole batch does, and Adam moves a weight whose
// gradient is far below its eps by lr g / eps: with eps 1e-6, 1e4 times the gradient's rounding, and one weight
// of 1,024 (an MLP unit this batch barely uses) ended 1.27e-5 to 3.1e-5 off after 3 steps (AVX2 processors, and
// the sanitizers' -Og build). With eps 1e-4 (below) the worst weight is 1.7e-6 off; a wrong schedule or split
// moves weights by ~lr (1e-2).
constexpr float weight_tolerance = 1e-5f;

sequential make_gpt(std::uint64_t seed = 7, const char* spec = tiny_gpt) {
  return sequential::from_spec(spec, sequential_options{"relu", seed});
}

// 10 windows of 8 bytes of text: 3 microbatches of 4, 3, 3 sequences; 4 of 3, 3, 2, 2.
dataset text_batch() {
  const std::string text = "It is a truth universally acknowledged, that a single man in possession of a good fortune, "
                           "must be in want of a wife.";
  return text_windows(std::vector<std::uint8_t>(text.begin(), text.end()), 8, 10, 3, "text");
}

optimizer_config adamw() {
  optimizer_config o;
  o.kind = "adamw";
  o.lr = 0.01f;
  o.weight_decay = 0.1f;
  // Adam's first step moves a weight by lr * g / (|g| + eps) whatever g's size: a gradient of 4e-8 (a GELU
  // unit barely used by this batch) moves by 0.8 lr with eps 1e-8, and its rounding in another summation
  // order (per microbatch) by 3e-5. eps 1e-4 makes that amplification 100 times smaller than eps 1e-6 did, and
  // keeps the test about the pipeline: a wrong schedule or split still moves the weights this batch trains by ~lr.
  o.eps = 1e-4f;
  return o;
}

using test::run_result;

run_result train_single(const dataset& d, const char* spec = tiny_gpt) {
  run_result r{make_gpt(7, spec), {}};
  local_runner runner(r.model, adamw());
  for (int s = 0; s < steps; ++s) r.losses.push_back(runner.train_step(d.inputs, d.labels, s));
  return r;
}

run_result train_pipeline(const dataset& d, pipeline_options o, const char* spec = tiny_gpt) {
  o.optimizer = adamw();
  pipeline pipe(make_gpt(7, spec), o);
  run_result r{sequential{}, {}};
  for (int s = 0; s < steps; ++s) r.losses.push_back(pipe.train_step(d.inputs, d.labels, s));
  r.model = pipe.gather_model();
  return r;
}

pipeline_options options(const std::string& schedule, int stages, int microbatches, int chunks = 1) {
  return test::pipeline_options_for(stages, microbatches, schedule, chunks);
}

// The losses of the first `steps` steps of AdamW at lr 3e-4, no warmup, on windows of the fortunes text (a fresh
// batch of 8 each step), from seed 1.
std::vector<float> first_losses(const std::string& spec, int count) {
  static const text_corpus corpus = load_text_corpus(default_text_path);
  const std::size_t context = parse_gpt_spec(spec).context;
  sequential model = sequential::from_spec(spec, sequential_options{"relu", 1});
  optimizer_config o;
  o.kind = "adamw";
  o.lr = 3e-4f;
  o.weight_decay = 0.1f;
  local_runner runner(model, o);
  std::vector<float> losses;
  for (int s = 0; s < count; ++s) {
    const dataset d = text_windows(corpus.train, context, 8, std::uint64_t(s) + 1, "fortunes");
    losses.push_back(runner.train_step(d.inputs, d.labels, std::uint64_t(s)));
  }
  return losses;
}

}  // namespace

TEST_CASE("GPT-2-shaped, vocabulary 1000, random token ids: 2 stages, a 1 x 2 x 2 mesh and bf16 equal one process") {
  const char* const spec = "gpt2-tiny:layers=2,dim=16,heads=2,context=8,vocab=1000";  // init=gpt2
  const dataset d = token_batch(1000, 8, 10, 5);
  CHECK(*std::max_element(d.inputs.begin(), d.inputs.end()) > 256.0f);
  run_result single = train_single(d, spec);
  CHECK(single.losses[2] < single.losses[0]);
  run_result piped = train_pipeline(d, options("1f1b", 2, 3), spec);
  test::check_same_run(piped, single, weight_tolerance, 1e-5, "vocabulary 1000 on 2 stages");

  optimizer_config opt = adamw();
  opt.lr = 1e-3f;  // as the meshes above: a wrong split moves weights by the whole lr
  sequential reference = make_gpt(7, spec);
  local_runner local(reference, opt);
  pipeline_options o = options("1f1b", 2, 2);
  o.optimizer = opt;
  o.tensor_parallel = 2;
  data_parallel_pipeline mesh(make_gpt(7, spec), o, 1);
  for (int s = 0; s < steps; ++s) {
    const float expected = local.train_step(d.inputs, d.labels, static_cast<std::uint64_t>(s));
    CHECK(mesh.train_step(d.inputs, d.labels, static_cast<std::uint64_t>(s)) == doctest::Approx(expected).epsilon(1e-5));
  }
  sequential gathered = mesh.first().gather_model();
  test::check_same_parameters(gathered, reference, weight_tolerance, "vocabulary 1000 on P = 2, T = 2");

  // bf16 (Note [compute dtype]) on 2 stages: it runs, and trains as float32 does to bfloat16's precision.
  pipeline_options b = options("1f1b", 2, 3);
  b.compute_dtype = dtype::bfloat16;
  run_result piped_bf16 = train_pipeline(d, b, spec);
  for (int s = 0; s < steps; ++s) CHECK(piped_bf16.losses[s] == doctest::Approx(single.losses[s]).epsilon(1e-2));
  CHECK(piped_bf16.losses[2] < piped_bf16.losses[0]);
}

TEST_CASE("LLaMA-style (rope, grouped-query heads, SwiGLU, RMSNorm): 2 stages, recomputed blocks and a 1 x 2 x 2 mesh equal one process") {
  // llama-tiny's choices at test widths: 4 heads sharing 2 kv heads, so T = 2 takes one group each.
  const char* const spec = "llama-tiny:layers=2,dim=16,heads=4,context=8,vocab=300,mlp=24";
  const dataset d = token_batch(300, 8, 10, 9);
  run_result single = train_single(d, spec);
  CHECK(single.losses[2] < single.losses[0]);
  CHECK(make_gpt(7, spec).size() == 5);  // no position layer: embedding, 2 blocks, the final norm, the head
  for (const pipeline_options& o : {options("1f1b", 2, 3), options("zb-h1", 2, 4), options("interleaved", 2, 4, 2)}) {
    CAPTURE(o.schedule);
    run_result piped = train_pipeline(d, o, spec);
    test::check_same_run(piped, single, weight_tolerance, 1e-5, "llama-tiny on 2 stages");
  }
  // Bit for bit the run that keeps everything (Note [recomputation]).
  pipeline_options r = options("1f1b", 2, 3);
  r.optimizer = adamw();
  sequential recomputing = make_gpt(7, spec);
  recomputing.set_recompute(recompute_mode::blocks);
  pipeline plain(make_gpt(7, spec), r), recomputed(std::move(recomputing), r);
  for (int s = 0; s < steps; ++s) {
    const float expected = plain.train_step(d.inputs, d.labels, static_cast<std::uint64_t>(s));
    CHECK(recomputed.train_step(d.inputs, d.labels, static_cast<std::uint64_t>(s)) == expected);
  }
  sequential a = recomputed.gather_model(), b = plain.gather_model();
  test::check_same_parameters(a, b, 0.0f, "llama-tiny, recomputed blocks");

  optimizer_config opt = adamw();
  opt.lr = 1e-3f;  // as the meshes below: a wrong split moves weights by the whole lr
  sequential reference = make_gpt(7, spec);
  local_runner local(reference, opt);
  pipeline_options o = options("1f1b", 2, 2);
  o.optimizer = opt;
  o.tensor_parallel = 2;
  data_parallel_pipeline mesh(make_gpt(7, spec), o, 1);
  for (int s = 0; s < steps; ++s) {
    const float expected = local.train_step(d.inputs, d.labels, static_cast<std::uint64_t>(s));
    CHECK(mesh.train_step(d.inputs, d.labels, static_cast<std::uint64_t>(s)) == doctest::Approx(expected).epsilon(1e-5));
  }
  sequential gathered = mesh.first().gather_model();
  test::check_same_parameters(gathered, reference, weight_tolerance, "llama-tiny on P = 2, T = 2");
}

TEST_CASE("Note [GPT-2 initialisation]: a 12-layer GPT-2-shaped model under AdamW 3e-4 without warmup falls from its first steps") {
  // docs/models.md gives these numbers. Bytes of the fortunes text (vocabulary 256), context 64, 8 windows a step.
  const std::string spec = "gpt2-tiny:layers=12,dim=384,heads=6,context=64,vocab=256";
  const std::vector<float> gpt2 = first_losses(spec, 5), kaiming = first_losses(spec + ",init=kaiming", 5);
  MESSAGE("init=gpt2 losses " << gpt2[0] << " " << gpt2[1] << " " << gpt2[2] << " " << gpt2[3] << " " << gpt2[4]);
  MESSAGE("init=kaiming losses " << kaiming[0] << " " << kaiming[1] << " " << kaiming[2] << " " << kaiming[3] << " "
                                 << kaiming[4]);
  CHECK(gpt2[4] < gpt2[0]);
  CHECK(gpt2[1] < gpt2[0]);
  CHECK(std::abs(gpt2[0] - std::log(256.0f)) < 0.2f);  // small logits: near the uniform guess
  CHECK(gpt2[0] < kaiming[0]);
  CHECK(gpt2[4] < kaiming[4]);
}

TEST_CASE("GPT: every schedule on 1..4 stages with unequal microbatches equals single-process training") {
  const dataset d = text_batch();
  run_result single = train_single(d);
  CHECK(single.losses[2] < single.losses[0]);  // it learns
  for (const std::string sched : {"gpipe", "1f1b", "zb-h1"})
    for (int stages = 1; stages <= 4; ++stages)
      for (int m : {3, 4}) {
        run_result piped = train_pipeline(d, options(sched, stages, m));
        test::check_same_run(piped, single, weight_tolerance, 1e-5,
                             sched + " p=" + std::to_string(stages) + " m=" + std::to_string(m));
      }
  for (const auto& [stages, m] : {std::pair{2, 4}, std::pair{3, 3}}) {
    run_result piped = train_pipeline(d, options("interleaved", stages, m, 2));
    test::check_same_run(piped, single, weight_tolerance, 1e-5,
                         "interleaved v=2 p=" + std::to_string(stages) + " m=" + std::to_string(m));
  }
  // 4 stages x 2 chunks need 8 elements: 4 decoder blocks.
  const char* const four_blocks = "gpt:layers=4,dim=16,heads=2,context=8";
  run_result single4 = train_single(d, four_blocks);
  run_result piped4 = train_pipeline(d, options("interleaved", 4, 4, 2), four_blocks);
  test::check_same_run(piped4, single4, weight_tolerance, 1e-5, "interleaved v=2 p=4 m=4, 4 blocks");
}

TEST_CASE("GPT: the parameter and time partitions split whole decoder blocks and train as one process") {
  const dataset d = text_batch();
  run_result single = train_single(d);
  const sequential model = make_gpt();
  const auto costs = measure_layer_costs(model, slice_rows(d.inputs, 0, 4));
  REQUIRE(costs.size() == 6);
  for (const partition_method method : {partition_method::parameters, partition_method::time}) {
    pipeline_options o = options("1f1b", 3, 3);
    o.layers_per_chunk = partition_counts(method, model, costs, 3);
    std::size_t total = 0;
    for (std::size_t c : o.layers_per_chunk) total += c;
    CHECK(total == 6);
    run_result piped = train_pipeline(d, o);
    test::check_same_run(piped, single, weight_tolerance, 1e-5, "partition " + to_string(method));
  }
}

TEST_CASE("GPT checkpoint: 2 stages save, 3 stages (and one process) resume to the uninterrupted result") {
  test::scratch_dir dir{"gpt_checkpoint"};
  const dataset d = text_batch();
  sequential reference = make_gpt();
  local_runner reference_runner(reference, adamw());
  for (int s = 0; s < 4; ++s) reference_runner.train_step(d.inputs, d.labels, s);

  const std::string path = (dir.path / "gpt.safetensors").string();
  pipeline_options two = options("1f1b", 2, 3);
  two.optimizer = adamw();
  pipeline first(make_gpt(), two);
  for (int s = 0; s < 2; ++s) first.train_step(d.inputs, d.labels, s);
  training_state state;
  state.step = 2;
  state.model_spec = tiny_gpt;
  first.save_checkpoint(path, state);

  pipeline_options three = options("zb-h1", 3, 4);
  three.optimizer = adamw();
  pipeline second(make_gpt(/*seed=*/99), three);
  CHECK(second.load_checkpoint(path).model_spec == tiny_gpt);
  for (int s = 2; s < 4; ++s) second.train_step(d.inputs, d.labels, s);
  sequential resumed = second.gather_model();
  test::check_same_parameters(resumed, reference, weight_tolerance, "3 stages resumed from 2");

  sequential single = make_gpt(/*seed=*/99);
  local_runner runner(single, adamw());
  CHECK(runner.load_checkpoint(path).step == 2);
  for (int s = 2; s < 4; ++s) runner.train_step(d.inputs, d.labels, s);
  test::check_same_parameters(single, reference, weight_tolerance, "one process resumed from 2 stages");
}

TEST_CASE("GPT on 2 node processes equals one process (1F1B, ZB-H1, interleaved)") {
  const dataset d = text_batch();
  test::node_process a(test::actorpipe), b(test::actorpipe);
  run_result single = train_single(d);
  for (pipeline_options o : {options("1f1b", 2, 3), options("zb-h1", 4, 4), options("interleaved", 2, 4, 2)}) {
    o.nodes = {a.address(), b.address()};
    o.security = test::tls_security();
    run_result remote = train_pipeline(d, o);
    test::check_same_run(remote, single, weight_tolerance, 1e-5,
                         o.schedule + " p=" + std::to_string(o.stages) + " on 2 nodes");
  }
}

TEST_CASE("GPT on D x P x T meshes (heads and block MLPs split inside stages), with clipping, equals one process") {
  const dataset d = text_batch();
  struct shape {
    int D, P, T;
    const char* schedule;
    float clip;
  };
  for (const shape m : {shape{2, 2, 1, "1f1b", 0.0f}, shape{2, 2, 1, "1f1b", 0.5f}, shape{1, 2, 2, "zb-h1", 0.0f},
                        shape{1, 3, 2, "interleaved", 0.5f}, shape{2, 2, 2, "1f1b", 0.5f}}) {
    CAPTURE(m.D);
    CAPTURE(m.P);
    CAPTURE(m.T);
    CAPTURE(m.schedule);
    CAPTURE(m.clip);
    // Split heads and MLPs sum their partial products in another order (~1e-7 relative); Adam's early steps
    // move a weight by ~lr whatever its gradient's size, so lr 1e-3 keeps the test about the mesh (as in
    // test_training_data_tensor.cpp's GPT cases): a weight whose gradient is near zero may still move by a few
    // percent of lr more or less (eps 1e-4 in adamw() bounds that), a wrong split by the whole lr.
    optimizer_config opt = adamw();
    opt.lr = 1e-3f;
    sequential reference = make_gpt();
    local_runner local(reference, opt, "cross_entropy", m.clip);
    pipeline_options o = options(m.schedule, m.P, m.schedule == std::string("interleaved") ? 3 : 2,
                                 m.schedule == std::string("interleaved") ? 2 : 1);
    o.optimizer = opt;
    o.clip_grad_norm = m.clip;
    o.tensor_parallel = m.T;
    data_parallel_pipeline mesh(make_gpt(), o, m.D);
    for (int s = 0; s < steps; ++s) {
      const float expected = local.train_step(d.inputs, d.labels, static_cast<std::uint64_t>(s));
      CHECK(mesh.train_step(d.inputs, d.labels, static_cast<std::uint64_t>(s)) == doctest::Approx(expected).epsilon(1e-5));
    }
    sequential gathered = mesh.first().gather_model();
    test::check_same_parameters(gathered, reference, weight_tolerance, "GPT mesh");
  }
}

TEST_CASE("GPT with recomputed blocks: every schedule, and T = 2, give the run without it bit for bit, stashing less") {
  // Note [recomputation] in model/block.hpp.
  const dataset d = text_batch();
  pipeline_options tp = options("1f1b", 2, 3);
  tp.tensor_parallel = 2;
  for (pipeline_options o : {options("1f1b", 2, 4), options("zb-h1", 2, 4), options("interleaved", 2, 4, 2), tp}) {
    CAPTURE(o.schedule);
    CAPTURE(o.tensor_parallel);
    o.optimizer = adamw();
    sequential recomputing = make_gpt();
    recomputing.set_recompute(recompute_mode::blocks);
    pipeline plain(make_gpt(), o), recomputed(std::move(recomputing), o);
    for (int s = 0; s < steps; ++s) {
      const float expected = plain.train_step(d.inputs, d.labels, static_cast<std::uint64_t>(s));
      CHECK(recomputed.train_step(d.inputs, d.labels, static_cast<std::uint64_t>(s)) == expected);
    }
    sequential a = recomputed.gather_model(), b = plain.gather_model();
    test::check_same_parameters(a, b, 0.0f, "recomputed blocks");
    const auto less = recomputed.last_peak_stash_bytes(), more = plain.last_peak_stash_bytes();
    REQUIRE(less.size() == more.size());
    std::uint64_t less_total = 0, more_total = 0;
    for (std::size_t s = 0; s < less.size(); ++s) {
      CAPTURE(s);
      CHECK(less[s] <= more[s]);  // a stage without a block (interleaved: stage 0 holds the embeddings and the
      less_total += less[s];      // final layer norm) stashes the same
      more_total += more[s];
    }
    CHECK(less_total < more_total);
  }
}

TEST_CASE("GPT over mixed sequence lengths: pipelines and a T = 2 mesh equal one process, step by step") {
  // Each step's batch cut to its own length; stages take the shape from the messages (Note [sequence lengths]).
  const dataset d = text_batch();
  const std::vector<std::size_t> lengths = {8, 3, 5, 8, 2};
  const batch whole{d.inputs, d.labels};
  std::vector<batch> batches;
  for (std::size_t L : lengths) batches.push_back(first_positions(whole, L));
  CHECK(batches[1].inputs.shape() == shape_t{10, 3});
  pipeline_options tp = options("1f1b", 2, 3);
  tp.tensor_parallel = 2;
  for (pipeline_options o : {options("1f1b", 2, 3), options("zb-h1", 3, 4), options("interleaved", 2, 4, 2), tp}) {
    CAPTURE(o.schedule);
    CAPTURE(o.tensor_parallel);
    o.optimizer = adamw();
    // Split heads and MLPs sum their partial products in another order: lr 1e-3 as in the D x P x T test.
    if (o.tensor_parallel > 1) o.optimizer.lr = 1e-3f;
    sequential reference = make_gpt();
    local_runner local(reference, o.optimizer);
    pipeline pipe(make_gpt(), o);
    for (std::size_t s = 0; s < batches.size(); ++s) {
      CAPTURE(s);
      const float expected = local.train_step(batches[s].inputs, batches[s].labels, s);
      CHECK(pipe.train_step(batches[s].inputs, batches[s].labels, s) == doctest::Approx(expected).epsilon(1e-5));
    }
    sequential gathered = pipe.gather_model();
    test::check_same_parameters(gathered, reference, weight_tolerance, "mixed lengths");
  }
}

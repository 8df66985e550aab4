// Tensor parallelism inside pipeline stages (Note [tensor-parallel stage]): P stages x T ranks train like one
// process (losses, weights, optimizer state within 1e-5) for every schedule kind, the whole state goes in
// and out of checkpoints, a failed step leaves the stage usable, and bad meshes are refused naming where.
#include <doctest/doctest.h>

#include "actors/pipeline.hpp"
#include "checkpoint/checkpoint.hpp"
#include "equivalence.hpp"
#include "pipeline_test_models.hpp"
#include "test_support.hpp"

using namespace ap;
using namespace ap::test;

namespace {

pipeline_options tp_options(int stages, int T, const std::string& schedule, int microbatches = 4) {
  pipeline_options o =
      pipeline_options_for(stages, microbatches, schedule, schedule == "interleaved" ? 2 : 1, adam_optimizer());
  o.tensor_parallel = T;
  return o;
}

void check_pipeline_equals_local(const pipeline_options& o, sequential (*make)(std::uint64_t), const dataset& d, int steps = 3) {
  CAPTURE(o.stages);
  CAPTURE(o.tensor_parallel);
  CAPTURE(o.schedule);
  sequential reference = make(7);
  local_runner local(reference, o.optimizer);
  pipeline pipe(make(7), o);
  for (int s = 0; s < steps; ++s) {
    const float expected = local.train_step(d.inputs, d.labels, static_cast<std::uint64_t>(s));
    const float got = pipe.train_step(d.inputs, d.labels, static_cast<std::uint64_t>(s));
    CHECK(got == doctest::Approx(expected).epsilon(1e-5));
  }
  sequential gathered = pipe.gather_model();
  check_same_parameters(gathered, reference, 1e-5f, "P x T");
}

}  // namespace

TEST_CASE("P stages x T tensor-parallel ranks equal single-process training, for every kind of schedule") {
  const dataset d = small_blobs(40);
  for (const char* schedule : {"gpipe", "1f1b", "zb-h1"})
    for (int T : {2, 4}) check_pipeline_equals_local(tp_options(2, T, schedule), linear_pairs_model, d);
  check_pipeline_equals_local(tp_options(1, 2, "1f1b"), linear_pairs_model, d);
  check_pipeline_equals_local(tp_options(3, 2, "1f1b", 3), linear_pairs_model, d);
  check_pipeline_equals_local(tp_options(2, 2, "interleaved"), linear_pairs_model, d);
  check_pipeline_equals_local(tp_options(2, 2, "sync-backward"), linear_pairs_model, d);
}

TEST_CASE("tensor-parallel stages of residual blocks, with dropout, equal single-process training") {
  // Pairs inside blocks are not split (only attention and block MLPs, by tensor_parallel_specs); the plain
  // Linear pairs are, and the blocks' layers run whole on every rank.
  const auto model = [](std::uint64_t seed) {
    sequential m = sequential::from_layer_specs(
        {"linear:12:16", "relu", "linear:16:16", "residual[layernorm:16,linear:16:32,gelu,dropout:0.1:3,linear:32:16]",
         "linear:16:32", "relu", "linear:32:16", "dropout:0.2:5", "linear:16:4"});
    m.initialize(seed);
    return m;
  };
  check_pipeline_equals_local(tp_options(2, 2, "1f1b"), model, small_blobs(40));
}

TEST_CASE("a P x T pipeline's checkpoint is the whole model's: it resumes in one process and on another layout") {
  const dataset d = small_blobs(40);
  const scratch_dir dir("tp_stage");
  const std::string path = dir.file("tp.ckpt");
  sequential reference = linear_pairs_model();
  local_runner local(reference, adam_optimizer());
  {
    pipeline pipe(linear_pairs_model(), tp_options(2, 2, "1f1b"));
    for (int s = 0; s < 2; ++s) {
      local.train_step(d.inputs, d.labels, static_cast<std::uint64_t>(s));
      pipe.train_step(d.inputs, d.labels, static_cast<std::uint64_t>(s));
    }
    pipe.save_checkpoint(path, training_state{2, 0, 2, 5, ""});
  }
  // One process, from the file, and 3 stages x T=4 from the file: both continue like the reference.
  sequential single = linear_pairs_model(99);
  local_runner resumed(single, adam_optimizer());
  CHECK(resumed.load_checkpoint(path).step == 2);
  pipeline other(linear_pairs_model(99), tp_options(3, 4, "1f1b", 3));
  other.load_checkpoint(path);
  const float expected = local.train_step(d.inputs, d.labels, 2);
  CHECK(resumed.train_step(d.inputs, d.labels, 2) == doctest::Approx(expected).epsilon(1e-5));
  CHECK(other.train_step(d.inputs, d.labels, 2) == doctest::Approx(expected).epsilon(1e-5));
  sequential gathered = other.gather_model();
  check_same_parameters(gathered, reference, 1e-5f, "3 x 4 after resuming");
  check_same_parameters(single, reference, 1e-5f, "one process after resuming");
}

TEST_CASE("a failed step on a tensor-parallel stage changes nothing, and the next step trains as in one process") {
  const dataset d = small_blobs(40);
  sequential reference = linear_pairs_model();
  local_runner local(reference, adam_optimizer());
  pipeline pipe(linear_pairs_model(), tp_options(2, 2, "1f1b"));
  tensor bad = tensor::from_shape({40, 11});  // a width stage 0's first layer refuses, on every rank
  const step_failure f = [&] {
    dataset wrong{"wrong width", bad, d.labels, 4};
    return failed_step(pipe, wrong, 0);
  }();
  CHECK(contains(f.message, "12"));
  for (int s = 1; s < 3; ++s) {
    const float expected = local.train_step(d.inputs, d.labels, static_cast<std::uint64_t>(s));
    CHECK(pipe.train_step(d.inputs, d.labels, static_cast<std::uint64_t>(s)) == doctest::Approx(expected).epsilon(1e-5));
  }
  sequential gathered = pipe.gather_model();
  check_same_parameters(gathered, reference, 1e-5f, "after a failed step");
}

TEST_CASE("bad tensor-parallel meshes are refused before any stage runs, naming the stage and layer") {
  // Building the pipeline, as a call check_refused makes.
  const auto build = [](const pipeline_options& o, sequential m) {
    return [o, m = std::move(m)]() mutable { pipeline p(std::move(m), o); };
  };
  check_refused(build(tp_options(2, 3, "1f1b"), linear_pairs_model()), {"--tensor-parallel 3", "stage 0", "16"});
  sequential unpaired = sequential::from_layer_specs({"linear:12:16", "layernorm:16", "linear:16:4"});
  unpaired.initialize(1);
  check_refused(build(tp_options(2, 2, "1f1b"), std::move(unpaired)), {"no chunk has a layer to split"});
  check_refused(build(tp_options(2, 0, "1f1b"), linear_pairs_model()), {"at least 1"});
}

TEST_CASE("a tensor-parallel stage's peak stash bytes count every rank's parallel layers") {
  // One stage, GPipe: all 4 microbatches (40 rows) are stashed at the peak. Per row, float32: unsplit,
  // linear x 12 + relu y 16 + linear x 16 = 44 elements; over T = 2, each rank holds the column layer's whole
  // x 12, relu's y 8 and the row layer's x shard 8 = 28, so 56 for the stage.
  const dataset d = small_blobs(40);
  const auto model = [] {
    sequential m = sequential::from_layer_specs({"linear:12:16", "relu", "linear:16:4"});
    m.initialize(7);
    return m;
  };
  for (int T : {1, 2}) {
    CAPTURE(T);
    pipeline pipe(model(), tp_options(1, T, "gpipe"));
    pipe.train_step(d.inputs, d.labels, 0);
    const auto bytes = pipe.last_peak_stash_bytes();
    REQUIRE(bytes.size() == 1);
    CHECK(bytes[0] == 40u * (T == 1 ? 44u : 56u) * 4u);
  }
}

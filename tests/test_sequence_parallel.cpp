// Sequence parallelism (model/sequence_parallel.hpp): which blocks run on a rank's rows, the shapes of the rows,
// training on T ranks with the rows divided equal to one process (in one process's threads and on pipeline
// stages, every schedule that keeps microbatches apart, with recomputation), a smaller stash, and refusals
// that name the flag and the shape.
#include <doctest/doctest.h>

#include "actors/pipeline.hpp"
#include "collective/lone_rank_group.hpp"
#include "equivalence.hpp"
#include "model/sequence_parallel.hpp"
#include "model/tensor_parallel.hpp"
#include "pipeline_test_models.hpp"
#include "test_support.hpp"
#include "training/data_tensor_runner.hpp"

using namespace ap;
using namespace ap::test;

namespace {

const char* const tiny_gpt = "gpt:layers=2,dim=16,heads=4,context=8";
const char* const tiny_llama = "llama-tiny:layers=2,dim=16,heads=4,context=8,vocab=256,mlp=24";

// 4 sequences of 8 byte tokens and their next tokens.
std::pair<tensor, tensor> token_batch() {
  const dataset d = test::token_batch(256, 8, 4, 1);
  return {d.inputs, d.labels};
}

// lr 1e-3: a split GPT's rounding moves Adam's first steps by ~1e-7 there (tests/test_training_data_tensor.cpp).
optimizer_config adam() {
  optimizer_config o;
  o.kind = "adam";
  o.lr = 1e-3f;
  return o;
}

std::size_t sequence_blocks_of(const std::string& spec) {
  return sequence_shard_blocks(tensor_parallel_specs(sequential::from_spec(spec).layer_specs()));
}

void check_mesh_equals_local(const std::string& spec, int D, int T, float clip = 0.0f, int steps = 3) {
  CAPTURE(spec);
  CAPTURE(D);
  CAPTURE(T);
  const auto [tokens, next] = token_batch();
  sequential reference = sequential::from_spec(spec), split = sequential::from_spec(spec);
  local_runner local(reference, adam(), "cross_entropy", clip);
  data_tensor_options o{D, T, clip};
  o.threads = 1;
  o.sequence_parallel = true;
  data_tensor_runner mesh(split, adam(), "cross_entropy", o);
  for (int s = 0; s < steps; ++s) {
    const float expected = local.train_step(tokens, next, static_cast<std::uint64_t>(s));
    const float got = mesh.train_step(tokens, next, static_cast<std::uint64_t>(s));
    CHECK(got == doctest::Approx(expected).epsilon(1e-5));
  }
  CHECK(check_close(mesh.predict(tokens), local.predict(tokens), 1e-5, 1e-5, "outputs"));
  check_same_parameters(split, reference, 1e-5f, "sequence-parallel mesh");
}

pipeline_options sp_options(int stages, int T, const std::string& schedule, bool sequence_parallel = true) {
  pipeline_options o = test::pipeline_options_for(stages, 2, schedule, schedule == "interleaved" ? 2 : 1, adam());
  o.tensor_parallel = T;
  o.sequence_parallel = sequence_parallel;
  o.threads = 1;
  return o;
}

void check_pipeline_equals_local(const pipeline_options& o, const std::string& spec,
                                 recompute_mode recompute = recompute_mode::none) {
  CAPTURE(spec);
  CAPTURE(o.stages);
  CAPTURE(o.schedule);
  CAPTURE(recompute_mode_name(recompute));
  const auto [tokens, next] = token_batch();
  sequential reference = sequential::from_spec(spec), split = sequential::from_spec(spec);
  split.set_recompute(recompute);
  local_runner local(reference, o.optimizer);
  pipeline pipe(split, o);
  for (int s = 0; s < 3; ++s) {
    const float expected = local.train_step(tokens, next, static_cast<std::uint64_t>(s));
    const float got = pipe.train_step(tokens, next, static_cast<std::uint64_t>(s));
    CHECK(got == doctest::Approx(expected).epsilon(1e-5));
  }
  sequential gathered = pipe.gather_model();
  check_same_parameters(gathered, reference, 1e-5f, "sequence-parallel pipeline");
}

}  // namespace

TEST_CASE("a rank's rows: (b, s / T, D) of a sequence, (n / T, D) of rows, and T must divide the axis") {
  CHECK(sequence_shard_shape({4, 8, 16}, 2, "x") == shape_t{4, 4, 16});
  CHECK(sequence_shard_shape({12, 16}, 3, "x") == shape_t{4, 16});
  CHECK(sequence_whole_shape({4, 4, 16}, 2) == shape_t{4, 8, 16});
  CHECK(sequence_whole_shape({4, 16}, 3) == shape_t{12, 16});
  check_refused([] { sequence_shard_shape({4, 6, 16}, 4, "block 3"); },
                {"block 3", "4 tensor-parallel ranks", "sequence length", "(4, 6, 16)"});
  check_refused([] { sequence_shard_shape({16}, 2, "block 1"); }, {"block 1", "divides rows", "(16)"});
  // Rank r's rows are the r-th contiguous slice of the whole: (b, s / T, D) from the flattened rows.
  tensor whole = tensor::from_shape({2, 4, 3});
  for (std::size_t i = 0; i < whole.size(); ++i) whole.data()[i] = static_cast<float>(i);
  lone_rank_group one("g", 1, 2);
  const tensor mine = sequence_shard(whole, one, "x");
  CHECK(mine.shape() == shape_t{2, 2, 3});
  CHECK(mine.data()[0] == 12.0f);
  CHECK(mine.data()[11] == 23.0f);
}

TEST_CASE("runs_on_sequence_shards: the blocks of GPT and LLaMA do, dropout, a lone column layer and plain layers do not") {
  CHECK(sequence_blocks_of(tiny_gpt) == 2);
  CHECK(sequence_blocks_of(tiny_llama) == 2);
  CHECK(sequence_blocks_of("12-16-8-4") == 0);  // Linear pairs outside blocks keep the whole rows
  CHECK(runs_on_sequence_shards("residual[layernorm:16,column_linear:16:32,gelu,row_linear:32:16]"));
  CHECK(runs_on_sequence_shards("residual[rmsnorm:16,parallel_swiglu_mlp:16:24]"));
  CHECK_FALSE(runs_on_sequence_shards("residual[layernorm:16,column_linear:16:32,gelu,dropout:0.1:3,row_linear:32:16]"));
  CHECK_FALSE(runs_on_sequence_shards("residual[layernorm:16,column_linear:16:32,gelu]"));  // ends on columns
  CHECK_FALSE(runs_on_sequence_shards("residual[layernorm:16,linear:16:16]"));               // nothing split
  CHECK_FALSE(runs_on_sequence_shards("column_linear:16:32"));                                // not a block
  CHECK_FALSE(runs_on_sequence_shards("residual[layernorm:16,column_linear:16:256:vocab=1]"));
}

TEST_CASE("sequence-parallel GPT and LLaMA train as one process: T = 2 and 4, D x T = 2 x 2, clipped") {
  check_mesh_equals_local(tiny_gpt, 1, 2);
  check_mesh_equals_local(tiny_gpt, 1, 4);  // 2 rows of each sequence per rank
  check_mesh_equals_local(tiny_gpt, 2, 2, 5.0f);
  check_mesh_equals_local(tiny_llama, 1, 2);
  check_mesh_equals_local("gpt:layers=2,dim=16,heads=4,context=8,vocab=300,tied=1,norm=rms", 1, 2);
}

TEST_CASE("sequence-parallel pipeline stages train as one process: 1F1B, ZB-H1 (split backward), interleaved, recomputed") {
  check_pipeline_equals_local(sp_options(2, 2, "1f1b"), tiny_gpt);
  check_pipeline_equals_local(sp_options(2, 2, "zb-h1"), tiny_llama);
  check_pipeline_equals_local(sp_options(2, 2, "interleaved"), tiny_gpt);
  check_pipeline_equals_local(sp_options(1, 2, "gpipe"), tiny_gpt, recompute_mode::blocks);
  check_pipeline_equals_local(sp_options(2, 2, "zb-h1"), tiny_llama, recompute_mode::blocks);
}

TEST_CASE("sequence parallelism shrinks a tensor-parallel stage's stash by what the Note says, and the memory model's rank alike") {
  // Per rank, each of the 2 blocks keeps 4 tensors of whole rows without sequence parallelism (the two norms'
  // inputs and the two column layers' inputs, D = 16 floats a row) and 2 norms' statistics (mean and 1 / sigma);
  // with it, half the rows of each: (4 x 16 + 2 x 2) x 4 bytes x 2 blocks x 32 rows / 2 = 8,704 bytes less.
  const std::size_t saved_per_rank = (4 * 16 + 2 * 2) * 4 * 2 * 32 / 2;
  const auto [tokens, next] = token_batch();
  std::vector<std::uint64_t> peak;
  for (bool sp : {false, true}) {
    pipeline pipe(sequential::from_spec(tiny_gpt), sp_options(1, 2, "gpipe", sp));  // both microbatches at the peak
    pipe.train_step(tokens, next, 0);
    peak.push_back(pipe.last_peak_stash_bytes().at(0));
  }
  CHECK(peak[0] - peak[1] == 2 * saved_per_rank);  // the stage's 2 ranks
  // The rank's model the memory model measures (one rank alone, its collectives returning at once).
  const sequential whole = sequential::from_spec(tiny_gpt);
  std::vector<std::size_t> stash;
  for (bool sp : {false, true}) {
    sequential rank = tensor_parallel_rank(whole, {whole.size()}, 0, 2, false, sp);
    sequential_cache cache;
    const tensor y = rank.forward(tokens, cache, forward_context{true, 0, 0});
    CHECK(shape_string(y) == "(4, 8, 256)");
    stash.push_back(stashed_bytes(cache));
  }
  CHECK(stash[0] - stash[1] == saved_per_rank);
}

TEST_CASE("sequence parallelism refuses one rank, a model without blocks to divide, the sync backward and an odd length") {
  const auto build = [](pipeline_options o, const std::string& spec) {
    return [o, spec] { pipeline p(sequential::from_spec(spec), o); };
  };
  check_refused(build(sp_options(2, 1, "1f1b"), tiny_gpt), {"--sequence-parallel", "--tensor-parallel 2", "got 1"});
  check_refused(build(sp_options(2, 2, "1f1b"), "12-16-8-4"), {"--sequence-parallel", "nothing to divide"});
  check_refused(build(sp_options(2, 2, "sync-backward"), tiny_gpt), {"--sequence-parallel", "synchronous backward"});
  sequential m = sequential::from_spec(tiny_gpt);
  data_tensor_options o{1, 1};
  o.sequence_parallel = true;
  check_refused([&] { data_tensor_runner(m, adam(), "cross_entropy", o); }, {"--sequence-parallel", "got 1"});
  // 3 ranks do not divide a sequence of 8: the step fails naming the block and the shape; nothing is updated.
  sequential three = sequential::from_spec("gpt:layers=1,dim=24,heads=6,context=8");
  sequential before = sequential::from_spec("gpt:layers=1,dim=24,heads=6,context=8");
  data_tensor_options t{1, 3};
  t.threads = 1;
  t.sequence_parallel = true;
  data_tensor_runner mesh(three, adam(), "cross_entropy", t);
  const auto [tokens, next] = token_batch();
  check_refused([&] { mesh.train_step(tokens, next, 0); }, {"3 tensor-parallel ranks", "sequence length", "(4, 8, 24)"});
  check_same_parameters(three, before, 0.0f, "after the refused step");
}

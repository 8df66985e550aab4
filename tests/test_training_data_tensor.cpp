// Data and tensor parallelism in one process (training/data_tensor_runner.hpp) against plain training of the
// same model on the same batches: losses, weights and optimizer state within 1e-5, for D x T meshes, with
// and without global gradient clipping; checkpoints; errors that name where.
#include <doctest/doctest.h>

#include <cstdio>

#include "checkpoint/checkpoint.hpp"
#include "checkpoint/safetensors.hpp"
#include "equivalence.hpp"
#include "failure/error.hpp"
#include "model/grad_clip.hpp"
#include "model/tensor_parallel.hpp"
#include "test_support.hpp"
#include "training/data_tensor_runner.hpp"

using namespace ap;
using namespace ap::test;

namespace {

tensor class_labels(std::size_t n, std::size_t classes, std::uint64_t seed) {
  tensor t = tensor::from_shape({n});
  for (std::size_t i = 0; i < n; ++i) t.data()[i] = static_cast<float>((i * 7 + seed) % classes);
  return t;
}

optimizer_config adam() {
  optimizer_config o;
  o.kind = "adam";
  o.lr = 1e-2f;
  return o;
}

// Trains `steps` steps on the same batches with a plain local_runner and with a data_tensor_runner, checking the
// losses step by step, then the weights (gathered into the mesh's whole model by predict).
void check_mesh_equals_local(const std::string& spec, int D, int T, float clip, const tensor& x, const tensor& labels,
                             int steps = 3, const optimizer_config& optimizer = adam()) {
  CAPTURE(spec);
  CAPTURE(D);
  CAPTURE(T);
  CAPTURE(clip);
  sequential reference = sequential::from_spec(spec), split = sequential::from_spec(spec);
  local_runner local(reference, optimizer, "cross_entropy", clip);
  data_tensor_options o{D, T, clip};
  o.threads = 1;  // one compute thread per rank, as ThreadSanitizer needs (scripts/sanitize.sh)
  data_tensor_runner mesh(split, optimizer, "cross_entropy", o);
  for (int s = 0; s < steps; ++s) {
    const float expected = local.train_step(x, labels, static_cast<std::uint64_t>(s));
    const float got = mesh.train_step(x, labels, static_cast<std::uint64_t>(s));
    CHECK(got == doctest::Approx(expected).epsilon(1e-5));
  }
  const tensor out = mesh.predict(x), expected_out = local.predict(x);
  CHECK(check_close(out, expected_out, 1e-5, 1e-5, "outputs"));
  check_same_parameters(split, reference, 1e-5f, "D x T mesh");
}

}  // namespace

TEST_CASE("megatron_mlp_specs pairs Linear layers across activations and leaves a last one whole") {
  CHECK(megatron_mlp_specs({"linear:8:16", "relu", "linear:16:8", "relu", "linear:8:4"}) ==
        std::vector<std::string>{"column_linear:8:16", "relu", "row_linear:16:8", "relu", "linear:8:4"});
  CHECK(megatron_mlp_specs({"linear:8:16", "gelu", "linear:16:8", "linear:8:4", "tanh", "linear:4:2"}) ==
        std::vector<std::string>{"column_linear:8:16", "gelu", "row_linear:16:8", "column_linear:8:4", "tanh",
                                 "row_linear:4:2"});
  // dropout and layernorm end a pair: their units count the whole width
  CHECK(megatron_mlp_specs({"linear:8:16", "dropout:0.1:3", "linear:16:8"}) ==
        std::vector<std::string>{"linear:8:16", "dropout:0.1:3", "linear:16:8"});
  CHECK(megatron_mlp_specs({"linear:8:16", "layernorm:16", "linear:16:8"}) ==
        std::vector<std::string>{"linear:8:16", "layernorm:16", "linear:16:8"});
}

TEST_CASE("data x tensor parallel MLP training equals one process, unequal replica shares included") {
  const tensor x = random_tensor({9, 12}, 5);  // 9 samples: replicas of 5 and 4 (D = 2), 3, 3, 3 (D = 3)
  const tensor labels = class_labels(9, 4, 1);
  for (auto [D, T] : std::vector<std::pair<int, int>>{{1, 1}, {2, 1}, {3, 1}, {1, 2}, {1, 4}, {2, 2}})
    check_mesh_equals_local("12-16-8-4", D, T, 0.0f, x, labels);
}

TEST_CASE("global gradient clipping over replicas and shards equals single-process clipping") {
  const tensor x = random_tensor({8, 12}, 6);
  const tensor labels = class_labels(8, 4, 2);
  // The norm of the first step's gradients is ~1 here: 0.05 clips every step, 100 never does.
  for (float clip : {0.05f, 100.0f})
    for (auto [D, T] : std::vector<std::pair<int, int>>{{2, 1}, {1, 2}, {2, 2}})
      check_mesh_equals_local("12-16-8-4", D, T, clip, x, labels);
}

TEST_CASE("clip_factor is min(1, max_norm / (norm + 1e-6)), 1 without clipping") {
  CHECK(clip_factor(4.0, 1.0f) == doctest::Approx(0.5f));
  CHECK(clip_factor(4.0, 5.0f) == 1.0f);
  CHECK(clip_factor(4.0, 0.0f) == 1.0f);
}

TEST_CASE("a GPT trains data-parallel exactly as in one process") {
  const std::size_t batch = 5, context = 4;
  tensor tokens = tensor::from_shape({batch, context}), next = tensor::from_shape({batch, context});
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    tokens.data()[i] = static_cast<float>((i * 37 + 11) % 256);
    next.data()[i] = static_cast<float>((i * 53 + 7) % 256);
  }
  check_mesh_equals_local("gpt:layers=1,dim=8,heads=2,context=4", 2, 1, 0.0f, tokens, next, 2);
}

namespace {

// 4 sequences of 8 byte tokens and their next tokens.
std::pair<tensor, tensor> gpt_batch() {
  tensor tokens = tensor::from_shape({4, 8}), next = tensor::from_shape({4, 8});
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    tokens.data()[i] = static_cast<float>((i * 37 + 11) % 256);
    next.data()[i] = static_cast<float>((i * 53 + 7) % 256);
  }
  return {tokens, next};
}

const char* const tiny_gpt = "gpt:layers=2,dim=16,heads=4,context=8";

// A split GPT's gradients differ from one process's by rounding (the ranks' partial products summed in
// another order): ~1e-7 relative, measured. Adam's early steps move a weight by about lr whatever its
// gradient's size, so at lr 1e-2 a gradient near 0 rounded differently moves the outputs of this tiny model
// by 1e-5 after 3 steps, 7e-5 with eps 1e-6 (tests/test_pipeline_gpt.cpp says the same of microbatches). At lr 1e-3 weights
// agree to ~1e-7 and outputs to ~5e-6 for every mesh here, data-parallel ones (T = 1) included.
optimizer_config gpt_adam() {
  optimizer_config o = adam();
  o.lr = 1e-3f;
  return o;
}

}  // namespace

TEST_CASE("a GPT trains tensor-parallel (heads and MLP split) and data x tensor parallel exactly as in one process") {
  const auto [tokens, next] = gpt_batch();
  for (auto [D, T] : std::vector<std::pair<int, int>>{{1, 2}, {1, 4}, {2, 2}})
    check_mesh_equals_local(tiny_gpt, D, T, 0.0f, tokens, next, 3, gpt_adam());
  check_mesh_equals_local(tiny_gpt, 2, 2, 5.0f, tokens, next, 3, gpt_adam());  // the norm is ~30: clipped every step
  // LLaMA-style: 4 heads sharing 2 kv heads (T = 2 takes a group each), the SwiGLU MLP split by hidden units.
  check_mesh_equals_local("llama-tiny:layers=2,dim=16,heads=4,context=8,vocab=256,mlp=24", 2, 2, 0.0f, tokens, next, 3,
                          gpt_adam());
  sequential m = sequential::from_spec(tiny_gpt);
  CHECK(data_tensor_runner(m, adam(), "cross_entropy", data_tensor_options{1, 2}).describe() ==
        "1 data-parallel replica x 2 tensor-parallel ranks = 2 threads; split: 0 vocab_embedding:256:16, 2-3 block "
        "(head_parallel_attention:16:4, column_linear:16:64, row_linear:64:16), 5 column_linear:16:256:vocab=1");
  sequential odd = sequential::from_spec("gpt:layers=1,dim=24,heads=3,context=8");  // 2 divides 24 and 96, not 3
  CHECK_THROWS_WITH_AS(data_tensor_runner(odd, adam(), "cross_entropy", data_tensor_options{1, 2}),
                       "stage 0, tensor-parallel degree 2: HeadParallelAttention(24, 3 heads) cannot split its 3 heads "
                       "over 2 tensor-parallel ranks of group 'tensor-parallel stage 0': 2 does not divide 3",
                       std::invalid_argument);
}

TEST_CASE("a GPT checkpoint saved at T = 2 is the unsplit model's: it loads at T = 1 exactly") {
  // LLaMA-style too: its QKV weight is cut in blocks of unequal widths (grouped-query attention, Note [shard
  // blocks]), its SwiGLU gate and up weight in 2 blocks.
  for (const char* spec : {tiny_gpt, "llama-tiny:layers=2,dim=16,heads=4,context=8,vocab=256,mlp=24"}) {
    CAPTURE(spec);
    const auto [tokens, next] = gpt_batch();
    sequential a = sequential::from_spec(spec), b = sequential::from_spec(spec);
    data_tensor_runner split(a, adam(), "cross_entropy", data_tensor_options{1, 2});
    for (int s = 0; s < 2; ++s) split.train_step(tokens, next, s);
    char path[] = "/tmp/actorpipe-mesh-gpt-XXXXXX";
    const int fd = mkstemp(path);
    REQUIRE(fd >= 0);
    split.save_checkpoint(path, training_state{});
    local_runner whole(b, adam(), "cross_entropy");
    whole.load_checkpoint(path);
    std::remove(path);
    check_same_parameters(b, a, 0.0f, "loaded in one process");  // a: the mesh's gathered view, as saved
    // Weights and optimizer state alike: both take the same next step.
    const float la = split.train_step(tokens, next, 2), lb = whole.train_step(tokens, next, 2);
    CHECK(la == doctest::Approx(lb).epsilon(1e-5));
    CHECK(check_close(split.predict(tokens), whole.predict(tokens), 1e-5, 1e-5, "outputs after the step"));
  }
}

TEST_CASE("a mesh checkpoint holds whole tensors: it loads into another mesh shape") {
  const tensor x = random_tensor({8, 12}, 7);
  const tensor labels = class_labels(8, 4, 3);
  sequential a = sequential::from_spec("12-16-8-4"), b = sequential::from_spec("12-16-8-4");
  data_tensor_runner split(a, adam(), "cross_entropy", data_tensor_options{2, 2});
  for (int s = 0; s < 2; ++s) split.train_step(x, labels, s);
  char path[] = "/tmp/actorpipe-mesh-XXXXXX";
  const int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  split.save_checkpoint(path, training_state{});
  data_tensor_runner other(b, adam(), "cross_entropy", data_tensor_options{1, 4});
  other.load_checkpoint(path);
  std::remove(path);
  // Both take the same next step from the same weights and optimizer state.
  const float la = split.train_step(x, labels, 2), lb = other.train_step(x, labels, 2);
  CHECK(la == doctest::Approx(lb).epsilon(1e-5));
  CHECK(check_close(split.predict(x), other.predict(x), 1e-5, 1e-5, "outputs after the step"));
}

TEST_CASE("replicas share the optimizer step: their checkpoint holds every part's state, as one process's (Note [shared optimizer step])") {
  const tensor x = random_tensor({12, 12}, 7);
  const tensor labels = class_labels(12, 4, 3);
  sequential a = sequential::from_spec("12-16-8-4"), b = sequential::from_spec("12-16-8-4");
  local_runner local(b, adam(), "cross_entropy");
  data_tensor_options o{3, 1};  // parts of unequal sizes: 12 x 16 weights over 3 replicas, biases of 8 and 4
  o.threads = 1;
  data_tensor_runner mesh(a, adam(), "cross_entropy", o);
  for (int s = 0; s < 3; ++s) {
    mesh.train_step(x, labels, static_cast<std::uint64_t>(s));
    local.train_step(x, labels, static_cast<std::uint64_t>(s));
  }
  char mesh_path[] = "/tmp/actorpipe-shared-step-XXXXXX", local_path[] = "/tmp/actorpipe-shared-step-XXXXXX";
  const int fd1 = mkstemp(mesh_path), fd2 = mkstemp(local_path);
  REQUIRE((fd1 >= 0 && fd2 >= 0));
  mesh.save_checkpoint(mesh_path, training_state{});
  local.save_checkpoint(local_path, training_state{});
  const safetensors_file got = read_safetensors(mesh_path), expected = read_safetensors(local_path);
  std::remove(mesh_path);
  std::remove(local_path);
  REQUIRE(got.tensors.size() == expected.tensors.size());
  std::size_t states = 0;
  for (const auto& [name, t] : expected.tensors) {
    CAPTURE(name);
    states += name.rfind(checkpoint_optimizer_prefix, 0) == 0;
    REQUIRE(got.tensors.count(name) == 1);
    CHECK(check_close(got.tensors.at(name), t, 1e-6, 1e-5, name));
  }
  CHECK(states == 12);  // m and v of three weights and three biases
  // The replicas all hold the whole updated weights: the next step's loss is one process's.
  CHECK(mesh.train_step(x, labels, 3) == doctest::Approx(local.train_step(x, labels, 3)).epsilon(1e-5));
}

TEST_CASE("bad meshes are refused before any step, naming the flag or the layer") {
  sequential m = sequential::from_spec("12-10-4");
  CHECK_THROWS_WITH_AS(data_tensor_runner(m, adam(), "cross_entropy", data_tensor_options{0, 1}),
                       "--data-parallel must be at least 1, got 0", std::invalid_argument);
  CHECK_THROWS_WITH_AS(data_tensor_runner(m, adam(), "cross_entropy", data_tensor_options{1, 4}),
                       "stage 0, tensor-parallel degree 4: ColumnParallelLinear(12->10) cannot split its 10 output "
                       "columns over 4 tensor-parallel ranks of group 'tensor-parallel stage 0': 4 does not divide 10",
                       std::invalid_argument);
  sequential single = sequential::from_spec("12-4");
  CHECK_THROWS_AS(data_tensor_runner(single, adam(), "cross_entropy", data_tensor_options{1, 2}), std::invalid_argument);
  data_tensor_runner ok(m, adam(), "cross_entropy", data_tensor_options{2, 2});
  CHECK(ok.describe() == "2 data-parallel replicas x 2 tensor-parallel ranks = 4 threads; split: 0 column_linear:12:10, 2 row_linear:10:4");
  CHECK_THROWS_WITH_AS(ok.train_step(random_tensor({1, 12}, 1), class_labels(1, 4, 0), 0),
                       "step 0: a batch of 1 samples cannot feed 2 data-parallel replicas", std::invalid_argument);
}

TEST_CASE("a replica that fails stops the step at once, naming it, with no update anywhere") {
  sequential m = sequential::from_spec("12-16-8-4");
  data_tensor_runner mesh(m, adam(), "cross_entropy", data_tensor_options{2, 2});
  const tensor x = random_tensor({6, 12}, 8);
  tensor labels = class_labels(6, 4, 0);
  labels.data()[5] = 9;  // out of range, in replica 1's share
  try {
    mesh.train_step(x, labels, 0);
    FAIL("a bad label trained");
  } catch (const std::runtime_error& e) {  // a step that failed while it ran, as a pipeline's (failure/error.hpp)
    CHECK(code_of(e) == error_code::bad_input);
    const std::string what = e.what();
    CHECK(what.find("(replica 1)") != std::string::npos);
    CHECK(what.find("label") != std::string::npos);
  }
  sequential fresh = sequential::from_spec("12-16-8-4");
  CHECK(check_close(mesh.predict(x), fresh.forward(x), 0.0, 0.0, "no update"));
  CHECK_THROWS_WITH_AS(mesh.train_step(x, class_labels(6, 4, 0), 1),
                       "step 1: the mesh is spent after a failed step (replica 1); resume from a checkpoint",
                       std::runtime_error);
}

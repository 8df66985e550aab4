// Pipeline checkpoints: one file of the whole model, loadable into another stage count, schedule or one
// process; resuming continues the same training; bad files are refused and change nothing.
#include <doctest/doctest.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "actors/pipeline.hpp"
#include "checkpoint/checkpoint.hpp"
#include "checkpoint/safetensors.hpp"  // not with actors/messages.hpp: both declare ap::named_tensors
#include "equivalence.hpp"
#include "pipeline_test_models.hpp"
#include "test_support.hpp"

using namespace ap;
namespace fs = std::filesystem;

namespace {

using namespace ap::test;

std::string file_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

template <class F>
void edit_checkpoint(const std::string& from, const std::string& to, F edit) {
  safetensors_file file = read_safetensors(from);
  edit(file);
  write_safetensors(to, file.tensors, file.metadata);
}

optimizer_config adam() {
  optimizer_config o;
  o.kind = "adam";
  o.lr = 0.01f;
  return o;
}

pipeline_options options(int stages, const std::string& schedule, int microbatches = 4, int chunks = 1) {
  return test::pipeline_options_for(stages, microbatches, schedule, chunks, adam());
}

std::string describe(const pipeline_options& o) {
  return o.schedule + " p=" + std::to_string(o.stages) + " v=" + std::to_string(o.chunks_per_stage);
}

void train_steps(step_runner& runner, const dataset& d, int from, int to) {
  for (int s = from; s < to; ++s) runner.train_step(d.inputs, d.labels, static_cast<std::uint64_t>(s));
}

}  // namespace

TEST_CASE("pipeline checkpoint: loads into another stage count, schedule or one process, and training continues") {
  scratch_dir dir{"pipeline_checkpoint"};
  const dataset d = test::small_blobs(32);
  // The reference: six uninterrupted single-process steps.
  sequential reference = test::nine_layer_model();
  local_runner reference_runner(reference, adam());
  train_steps(reference_runner, d, 0, 6);

  // Three steps on 2 stages with GPipe, then a checkpoint.
  const std::string path = dir.file("two_stages.safetensors");
  pipeline first(test::nine_layer_model(), options(2, "gpipe"));
  train_steps(first, d, 0, 3);
  training_state state;
  state.step = 3;
  state.data_seed = 17;
  state.model_spec = "nine layers";
  first.save_checkpoint(path, state);
  sequential saved = first.gather_model();

  const checkpoint_info info = read_checkpoint_info(path);
  CHECK(info.layer_specs == saved.layer_specs());
  CHECK(info.optimizer_steps == 3);
  CHECK(info.has_optimizer_state);

  for (const pipeline_options& o : {options(4, "1f1b"), options(2, "interleaved", 4, 2), options(3, "zb-h1", 2),
                                    options(1, "gpipe", 1)}) {
    const std::string label = describe(o);
    pipeline second(test::nine_layer_model(/*seed=*/99), o);  // other weights, fresh optimizers
    const training_state loaded = second.load_checkpoint(path);
    CHECK(loaded.step == 3);
    CHECK(loaded.data_seed == 17);
    CHECK(loaded.model_spec == "nine layers");
    sequential after_load = second.gather_model();
    test::check_same_parameters(after_load, saved, 0.0f, label + " after loading");
    train_steps(second, d, 3, 6);
    sequential continued = second.gather_model();
    test::check_same_parameters(continued, reference, 1e-5f, label + " continued");
  }

  SUBCASE("into one process, and a single process's checkpoint into a pipeline") {
    sequential single = test::nine_layer_model(/*seed=*/99);
    local_runner runner(single, adam());
    CHECK(runner.load_checkpoint(path).step == 3);
    test::check_same_parameters(single, saved, 0.0f, "one process after loading");
    train_steps(runner, d, 3, 6);
    test::check_same_parameters(single, reference, 1e-5f, "one process continued");

    sequential half = test::nine_layer_model();
    local_runner half_runner(half, adam());
    train_steps(half_runner, d, 0, 3);
    const std::string single_path = dir.file("single.safetensors");
    half_runner.save_checkpoint(single_path, training_state{3, 0, 3, 5, "nine"});
    pipeline piped(test::nine_layer_model(/*seed=*/99), options(4, "interleaved", 4, 2));
    CHECK(piped.load_checkpoint(single_path).batch_in_epoch == 3);
    sequential loaded = piped.gather_model();
    test::check_same_parameters(loaded, half, 0.0f, "single-process checkpoint in 4x2 chunks");
    train_steps(piped, d, 3, 6);
    sequential continued = piped.gather_model();
    test::check_same_parameters(continued, reference, 1e-5f, "single-process checkpoint continued on 4x2 chunks");
  }
}

TEST_CASE("pipeline resume through the trainer: N steps, checkpoint, a new pipeline takes M more == N+M") {
  scratch_dir dir{"pipeline_checkpoint"};
  const dataset d = test::small_blobs(48);
  pipeline whole(test::nine_layer_model(), options(2, "1f1b", 3));
  train(whole, d, dataset{}, test::small_train_config());
  sequential expected = whole.gather_model();

  for (std::size_t n : {5, 7}) {
    const std::string path = dir.file("resume" + std::to_string(n) + ".safetensors");
    pipeline first(test::nine_layer_model(), options(3, "gpipe", 2));
    train_config c1 = test::small_train_config();
    c1.max_steps = n;
    c1.checkpoint = [&](const training_state& at) { first.save_checkpoint(path, at); };
    CHECK(train(first, d, dataset{}, c1).steps == n);

    pipeline second(test::nine_layer_model(/*seed=*/42), options(4, "interleaved", 4, 2));
    const training_state at = second.load_checkpoint(path);
    CHECK(at.step == n);
    train_config c2 = test::small_train_config();
    c2.start_step = at.step, c2.start_epoch = at.epoch, c2.start_batch = at.batch_in_epoch;
    c2.seed = at.data_seed;
    CHECK(train(second, d, dataset{}, c2).steps == 15 - n);
    sequential resumed = second.gather_model();
    test::check_same_parameters(resumed, expected, 1e-5f, "resumed after " + std::to_string(n) + " steps");
  }
}

TEST_CASE("pipeline checkpoint refusals name the file and the tensor, and leave the running pipeline unchanged") {
  scratch_dir dir{"pipeline_checkpoint"};
  const dataset d = test::small_blobs(32);
  const std::string good = dir.file("good.safetensors"), bad = dir.file("bad.safetensors");
  {
    pipeline source(test::nine_layer_model(/*seed=*/5), options(3, "1f1b"));
    train_steps(source, d, 0, 2);
    source.save_checkpoint(good, training_state{2, 0, 2, 1, "nine"});
  }
  // The running pipeline, and a twin that never sees a bad file.
  pipeline running(test::nine_layer_model(), options(2, "1f1b"));
  pipeline twin(test::nine_layer_model(), options(2, "1f1b"));
  train_steps(running, d, 0, 2);
  train_steps(twin, d, 0, 2);
  sequential before = running.gather_model();

  std::string error;
  SUBCASE("a truncated file") {
    const std::string bytes = file_bytes(good);
    std::ofstream(bad, std::ios::binary) << bytes.substr(0, bytes.size() / 2);
    error = error_of([&] { running.load_checkpoint(bad); });
    CHECK(contains(error, bad));
  }
  SUBCASE("a checkpoint of another model") {
    sequential other;
    for (const char* spec : {"linear:12:8", "relu", "linear:8:4"}) other.add(make_layer(spec));
    other.initialize(1);
    local_runner other_runner(other, adam());
    other_runner.save_checkpoint(bad, training_state{});
    error = error_of([&] { running.load_checkpoint(bad); });
    CHECK(contains(error, "checkpoint " + bad + ": holds a different model"));
    CHECK(contains(error, "linear:12:8;relu;linear:8:4"));
  }
  SUBCASE("a tensor of the wrong shape") {
    edit_checkpoint(good, bad, [](safetensors_file& f) { f.tensors["4.weight"] = zeros({16, 8}); });
    error = error_of([&] { running.load_checkpoint(bad); });
    CHECK(contains(error, "checkpoint " + bad + ": tensor 4.weight has shape (16, 8)"));
  }
  SUBCASE("a bfloat16 tensor (a real BF16 entry in the file)") {
    edit_checkpoint(good, bad, [](safetensors_file& f) {
      f.tensors["optimizer/4.weight.m"] = f.tensors["optimizer/4.weight.m"].astype(dtype::bfloat16);
    });
    error = error_of([&] { running.load_checkpoint(bad); });
    CHECK(contains(error, "checkpoint " + bad +
                              ": tensor optimizer/4.weight.m is bfloat16 (16, 16), the optimizer's state is float32 (16, 16)"));
  }
  SUBCASE("a missing optimizer tensor") {
    edit_checkpoint(good, bad, [](safetensors_file& f) { f.tensors.erase("optimizer/6.weight.v"); });
    error = error_of([&] { running.load_checkpoint(bad); });
    CHECK(contains(error, "checkpoint " + bad + ": missing tensor optimizer/6.weight.v"));
  }
  SUBCASE("a checkpoint of another optimizer") {
    pipeline_options sgd = options(2, "gpipe");
    sgd.optimizer.kind = "sgd";
    sgd.optimizer.momentum = 0.9f;
    pipeline other(test::nine_layer_model(), sgd);
    train_steps(other, d, 0, 1);
    other.save_checkpoint(bad, training_state{});
    error = error_of([&] { running.load_checkpoint(bad); });
    CHECK(contains(error, "checkpoint " + bad + ": unexpected tensor optimizer/"));
    CHECK(contains(error, ".momentum"));
  }
  SUBCASE("a missing file") {
    error = error_of([&] { running.load_checkpoint(dir.file("none.safetensors")); });
    CHECK(contains(error, dir.file("none.safetensors")));
  }
  sequential after = running.gather_model();
  test::check_same_parameters(after, before, 0.0f, "after the refusal");
  // Nothing changed, optimizer state included: the next steps are the twin's.
  train_steps(running, d, 2, 4);
  train_steps(twin, d, 2, 4);
  sequential running_model = running.gather_model(), twin_model = twin.gather_model();
  test::check_same_parameters(running_model, twin_model, 0.0f, "training on after the refusal");
}

TEST_CASE("pipeline checkpoint is written atomically: no temporary file left, an existing file replaced whole") {
  scratch_dir dir{"pipeline_checkpoint"};
  const dataset d = test::small_blobs(16);
  const std::string path = dir.file("run.safetensors"), fresh = dir.file("fresh.safetensors");
  std::ofstream(path, std::ios::binary) << std::string(1 << 20, 'x');  // an old, bigger file
  pipeline pipe(test::nine_layer_model(), options(2, "gpipe", 2));
  train_steps(pipe, d, 0, 1);
  pipe.save_checkpoint(path, training_state{1, 0, 1, 1, "nine"});
  pipe.save_checkpoint(fresh, training_state{1, 0, 1, 1, "nine"});
  CHECK(file_bytes(path) == file_bytes(fresh));
  for (const auto& entry : fs::directory_iterator(dir.path)) {
    INFO(entry.path().string());
    CHECK(entry.path().filename().string().find(".tmp") == std::string::npos);
  }
  CHECK(read_checkpoint_info(path).state.step == 1);
}

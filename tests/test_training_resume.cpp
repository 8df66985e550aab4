// Resuming single-process training from a checkpoint continues the same trajectory, bit for bit.
#include <doctest/doctest.h>

#include <unistd.h>

#include <filesystem>

#include "checkpoint/checkpoint.hpp"
#include "equivalence.hpp"
#include "pipeline_test_models.hpp"
#include "training/trainer.hpp"
#include "test_support.hpp"

using namespace ap;
namespace fs = std::filesystem;

namespace {

using namespace ap::test;

optimizer_config adam() {
  optimizer_config o;
  o.kind = "adam";
  o.lr = 0.01f;
  return o;
}

optimizer_config sgd_momentum() {
  optimizer_config o;
  o.kind = "sgd";
  o.lr = 0.05f;
  o.momentum = 0.9f;
  return o;
}

// Warmup over updates 0..5 and a cosine to min_lr at update 15, the run's end: resuming at N = 3 or 5 resumes
// mid-warmup, at 7 or 14 mid-decay (Note [lr from the optimizer's steps]).
optimizer_config warmup_cosine(optimizer_config o) {
  o.schedule.kind = "cosine";
  o.schedule.warmup_steps = 6;
  o.schedule.decay_steps = 15;
  o.schedule.min_lr = o.lr / 10;
  return o;
}

}  // namespace

TEST_CASE("the checkpoint hook sees the position after every N steps and at the end") {
  const dataset d = test::small_blobs(48);
  sequential model = test::nine_layer_model();
  local_runner runner(model, adam());
  train_config c = test::small_train_config();
  c.checkpoint_every = 4;
  std::vector<training_state> seen;
  c.checkpoint = [&](const training_state& at) { seen.push_back(at); };
  const train_report r = train(runner, d, dataset{}, c);
  CHECK(r.steps == 15);
  REQUIRE(seen.size() == 4);  // steps 4, 8, 12 and the end (15)
  const std::uint64_t expected[4][3] = {{4, 0, 4}, {8, 1, 3}, {12, 2, 2}, {15, 3, 0}};  // step, epoch, batch
  for (std::size_t i = 0; i < 4; ++i) {
    INFO("checkpoint " << i);
    CHECK(seen[i].step == expected[i][0]);
    CHECK(seen[i].epoch == expected[i][1]);
    CHECK(seen[i].batch_in_epoch == expected[i][2]);
    CHECK(seen[i].data_seed == 5);
  }
}

TEST_CASE("single process: N steps, checkpoint, a new runner loads it and takes M more == N+M uninterrupted, bit for bit") {
  const dataset d = test::small_blobs(48);
  for (const optimizer_config& opt : {adam(), sgd_momentum(), warmup_cosine(adam()), warmup_cosine(sgd_momentum())})
    for (std::size_t n : {3, 5, 7, 14}) {  // mid-epoch, at an epoch's end, mid-epoch, one step before the end
      const std::string label = opt.kind + " " + opt.schedule.kind + " N=" + std::to_string(n);
      scratch_dir dir{"training_resume"};
      const std::string path = dir.file("resume.safetensors");

      sequential whole = test::nine_layer_model();
      local_runner whole_runner(whole, opt);
      train(whole_runner, d, dataset{}, test::small_train_config());

      sequential first = test::nine_layer_model();
      local_runner first_runner(first, opt);
      train_config c1 = test::small_train_config();
      c1.max_steps = n;
      c1.checkpoint = [&](const training_state& at) { first_runner.save_checkpoint(path, at); };
      CHECK(train(first_runner, d, dataset{}, c1).steps == n);

      // Another initialisation and a fresh optimizer: everything that matters comes from the checkpoint.
      sequential second = test::nine_layer_model(/*seed=*/99);
      local_runner second_runner(second, opt);
      const training_state at = second_runner.load_checkpoint(path);
      CHECK(at.step == n);
      train_config c2 = test::small_train_config();
      c2.start_step = at.step, c2.start_epoch = at.epoch, c2.start_batch = at.batch_in_epoch;
      c2.seed = at.data_seed;
      CHECK(train(second_runner, d, dataset{}, c2).steps == 15 - n);
      check_same_parameters(second, whole, 0.0f, label);
    }
}

TEST_CASE("resuming from the checkpoints an uninterrupted run wrote along the way ends where it ends") {
  const dataset d = test::small_blobs(48);
  scratch_dir dir{"training_resume"};
  sequential whole = test::nine_layer_model();
  local_runner whole_runner(whole, adam());
  train_config c = test::small_train_config();
  c.checkpoint_every = 4;
  c.checkpoint = [&](const training_state& at) {
    whole_runner.save_checkpoint(dir.file("step" + std::to_string(at.step) + ".safetensors"), at);
  };
  train(whole_runner, d, dataset{}, c);
  for (int step : {4, 8, 12, 15}) {
    sequential resumed = test::nine_layer_model(/*seed=*/3);
    local_runner runner(resumed, adam());
    const training_state at = runner.load_checkpoint(dir.file("step" + std::to_string(step) + ".safetensors"));
    train_config c2 = test::small_train_config();
    c2.start_step = at.step, c2.start_epoch = at.epoch, c2.start_batch = at.batch_in_epoch;
    c2.seed = at.data_seed;
    train(runner, d, dataset{}, c2);
    check_same_parameters(resumed, whole, 0.0f, "resumed at step " + std::to_string(step));
  }
}

TEST_CASE("max_steps counts the resumed steps, and a start beyond the epoch is refused") {
  const dataset d = test::small_blobs(48);
  sequential model = test::nine_layer_model();
  local_runner runner(model, adam());
  train_config c = test::small_train_config();
  c.start_step = 6, c.start_epoch = 1, c.start_batch = 1;
  c.max_steps = 9;
  CHECK(train(runner, d, dataset{}, c).steps == 3);
  c.start_batch = 6;
  try {
    train(runner, d, dataset{}, c);
    FAIL("no exception");
  } catch (const std::invalid_argument& e) {
    CHECK(std::string(e.what()).find("start batch 6") != std::string::npos);
  }
}

TEST_CASE("the single-process runner refuses inputs of the wrong dtype or width before any layer runs, naming the layer and both") {
  const dataset d = test::small_blobs(8);
  sequential model = test::nine_layer_model();
  const sequential before = model.clone();
  optimizer_config opt;
  opt.kind = "adam";
  local_runner runner(model, opt);
  CHECK_THROWS_WITH_AS(runner.train_step(d.inputs.astype(dtype::bfloat16), d.labels, 0),
                       "layer 0 Linear(12->16) takes float32 input, got bfloat16 (8, 12)", std::invalid_argument);
  CHECK_THROWS_WITH_AS(runner.train_step(zeros({8, 10}), d.labels, 0),
                       "layer 0 Linear(12->16) takes 12 features, got input of shape (8, 10)", std::invalid_argument);
  sequential copy = before.clone();
  test::check_same_parameters(model, copy, 0.0f, "after the refusals");
  CHECK(std::isfinite(runner.train_step(d.inputs, d.labels, 0)));
}

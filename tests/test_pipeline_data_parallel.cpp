// Data parallelism composed with the pipeline (Note [data-parallel pipeline]): D replicas x P stages (x T
// tensor-parallel ranks) train like one process on the whole batch, clipping included; a failure in one
// replica fails the step everywhere with nothing applied; checkpoints are the whole model's.
#include <doctest/doctest.h>

#include "actors/data_parallel_pipeline.hpp"
#include "equivalence.hpp"
#include "pipeline_test_models.hpp"
#include "test_support.hpp"

using namespace ap;
using namespace ap::test;

namespace {

pipeline_options mesh_options_for(int stages, int T, const std::string& schedule, float clip = 0.0f) {
  pipeline_options o = pipeline_options_for(stages, 2, schedule, schedule == "interleaved" ? 2 : 1, adam_optimizer());
  o.tensor_parallel = T;
  o.clip_grad_norm = clip;
  return o;
}

void check_equals_local(const pipeline_options& o, int D, sequential (*make)(std::uint64_t), const dataset& d, int steps = 3) {
  CAPTURE(D);
  CAPTURE(o.stages);
  CAPTURE(o.tensor_parallel);
  CAPTURE(o.schedule);
  CAPTURE(o.clip_grad_norm);
  sequential reference = make(7);
  local_runner local(reference, o.optimizer, "cross_entropy", o.clip_grad_norm);
  data_parallel_pipeline mesh(make(7), o, D);
  for (int s = 0; s < steps; ++s) {
    const float expected = local.train_step(d.inputs, d.labels, static_cast<std::uint64_t>(s));
    const float got = mesh.train_step(d.inputs, d.labels, static_cast<std::uint64_t>(s));
    CHECK(got == doctest::Approx(expected).epsilon(1e-5));
  }
  sequential gathered = mesh.first().gather_model();
  check_same_parameters(gathered, reference, 1e-5f, "D x P x T");
}

}  // namespace

TEST_CASE("D replicas x P stages equal single-process training on the whole batch, for every kind of schedule") {
  const dataset d = small_blobs(42);  // 21 rows a replica at D = 2, 14 at D = 3: unequal microbatches
  for (const char* schedule : {"gpipe", "1f1b", "zb-h1", "interleaved", "sync-backward"})
    check_equals_local(mesh_options_for(2, 1, schedule), 2, linear_pairs_model, d);
  check_equals_local(mesh_options_for(2, 1, "1f1b"), 3, linear_pairs_model, d);
  check_equals_local(mesh_options_for(1, 1, "gpipe"), 2, linear_pairs_model, d);
}

TEST_CASE("dropout masks follow global sample indices: a replica's rows drop as in one process") {
  check_equals_local(mesh_options_for(2, 1, "1f1b"), 2, test::nine_layer_model, small_blobs(40));
}

TEST_CASE("the full mesh: D = 2 x P = 2 x T = 2 equals single-process training") {
  check_equals_local(mesh_options_for(2, 2, "1f1b"), 2, linear_pairs_model, small_blobs(40));
  check_equals_local(mesh_options_for(2, 2, "zb-h1"), 2, linear_pairs_model, small_blobs(40));
}

TEST_CASE("global gradient clipping over every stage, rank and replica equals single-process clipping") {
  const dataset d = small_blobs(40);
  // 0.05 clips every step (the gradients' norm here is ~1); 100 never does.
  for (float clip : {0.05f, 100.0f}) {
    check_equals_local(mesh_options_for(2, 1, "1f1b", clip), 1, linear_pairs_model, d);
    check_equals_local(mesh_options_for(2, 2, "zb-h1", clip), 1, linear_pairs_model, d);
    check_equals_local(mesh_options_for(2, 2, "1f1b", clip), 2, linear_pairs_model, d);
    check_equals_local(mesh_options_for(3, 1, "gpipe", clip), 2, test::nine_layer_model, d);
  }
}

TEST_CASE("a replica's failure fails the step in every replica, nothing applied, the pipeline is then spent") {
  const dataset d = small_blobs(40);
  data_parallel_pipeline mesh(linear_pairs_model(), mesh_options_for(2, 2, "1f1b"), 2);
  tensor labels = d.labels;
  labels.data()[30] = 99.0f;  // replica 1's rows (20..39): no such class
  std::string failure;
  try {
    mesh.train_step(d.inputs, labels, 0);
  } catch (const pipeline_error& e) {
    failure = e.what();
  }
  INFO(failure);
  CHECK(contains(failure, "99"));
  CHECK(contains(failure, "data-parallel replica 1"));
  sequential untouched = linear_pairs_model(), gathered = mesh.first().gather_model();
  check_same_parameters(gathered, untouched, 0.0f, "after the failed step");
  CHECK(contains(error_of([&] { mesh.train_step(d.inputs, d.labels, 1); }), "spent"));
}

TEST_CASE("a D x P x T checkpoint is the whole model's: it resumes in one process") {
  const dataset d = small_blobs(40);
  const scratch_dir dir("dp_pipeline");
  const std::string path = dir.file("dp.ckpt");
  sequential reference = linear_pairs_model();
  local_runner local(reference, adam_optimizer());
  {
    data_parallel_pipeline mesh(linear_pairs_model(), mesh_options_for(2, 2, "1f1b"), 2);
    for (int s = 0; s < 2; ++s) {
      local.train_step(d.inputs, d.labels, static_cast<std::uint64_t>(s));
      mesh.train_step(d.inputs, d.labels, static_cast<std::uint64_t>(s));
    }
    mesh.save_checkpoint(path, training_state{2, 0, 2, 5, ""});
  }
  data_parallel_pipeline other(linear_pairs_model(99), mesh_options_for(3, 1, "gpipe"), 3);
  CHECK(other.load_checkpoint(path).step == 2);
  const float expected = local.train_step(d.inputs, d.labels, 2);
  CHECK(other.train_step(d.inputs, d.labels, 2) == doctest::Approx(expected).epsilon(1e-5));
  sequential gathered = other.first().gather_model();
  check_same_parameters(gathered, reference, 1e-5f, "D = 3 x P = 3 after resuming");
}

TEST_CASE("the replicas run the schedule's R actions (Note [gradient reduction]), one replica runs them as no-ops") {
  const dataset d = small_blobs(40);
  pipeline_options o = mesh_options_for(2, 1, "interleaved");
  o.microbatches = 2;
  o.record_events = true;
  data_parallel_pipeline mesh(linear_pairs_model(), o, 2);
  CHECK(has_gradient_reductions(mesh.first().schedule()));
  mesh.train_step(d.inputs, d.labels, 0);
  int reductions = 0;
  for (const stage_event& e : mesh.first().events())
    reductions += e.task == op::reduce_grad && e.kind == event_kind::finish;
  CHECK(reductions == 4);  // one per chunk: 2 stages x 2 chunks
  // A schedule file with R, run without replicas: the same as without R.
  pipeline_options one = mesh_options_for(2, 1, "1f1b");
  one.custom_schedule = with_gradient_reductions(make_1f1b(2, 2));
  check_equals_local(one, 1, linear_pairs_model, d);
}

TEST_CASE("replicas refuse inputs of the wrong width before any starts, naming the layer (from the model's first layers)") {
  const dataset d = test::small_blobs(8);
  pipeline_options o = pipeline_options_for(2, 2);
  data_parallel_pipeline pipe(test::nine_layer_model(), o, 2);
  CHECK_THROWS_WITH_AS(pipe.train_step(tensor::from_shape({8, 10}), d.labels, 0),
                       "step 0: inputs: layer 0 Linear(12->16) takes 12 features, got input of shape (8, 10)",
                       pipeline_error);
  CHECK(std::isfinite(pipe.train_step(d.inputs, d.labels, 1)));
}

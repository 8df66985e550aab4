// Every schedule at the runtime: fewer microbatches than stages (works, or a clear error at construction),
// and the stashed activations the runtime counts equal the simulator's peak_stash.
#include <doctest/doctest.h>

#include <cmath>

#include "actors/pipeline.hpp"
#include "pipeline_test_models.hpp"

using namespace ap;

namespace {

constexpr int steps = 2;

pipeline_options options_for(const std::string& sched, int stages, int microbatches, int chunks = 1) {
  pipeline_options o = test::pipeline_options_for(stages, microbatches, sched, chunks);
  o.optimizer.kind = "adam";
  o.optimizer.lr = 0.01f;
  return o;
}

}  // namespace

TEST_CASE("fewer microbatches than stages (p=4, m=2) trains like a single process for gpipe, 1f1b and zb-h1") {
  const dataset d = test::small_blobs(30);
  sequential single = test::nine_layer_model();
  local_runner runner(single, options_for("gpipe", 4, 2).optimizer);
  std::vector<float> single_losses;
  for (int s = 0; s < steps; ++s) single_losses.push_back(runner.train_step(d.inputs, d.labels, s));

  for (const std::string sched : {"gpipe", "1f1b", "zb-h1"}) {
    pipeline pipe(test::nine_layer_model(), options_for(sched, 4, 2));
    for (int s = 0; s < steps; ++s) {
      INFO(sched << " p=4 m=2: loss of step " << s);
      CHECK(pipe.train_step(d.inputs, d.labels, s) == doctest::Approx(single_losses[s]).epsilon(1e-5));
    }
    sequential piped = pipe.gather_model();
    test::check_same_parameters(single, piped, 1e-5f, sched + " p=4 m=2");
    // Only two microbatches exist: no stage can hold more.
    for (int peak : pipe.last_peak_stash()) CHECK(peak <= 2);
  }
}

TEST_CASE("interleaved with fewer microbatches than stages is refused at construction, naming the counts") {
  const sequential model = test::nine_layer_model();
  CHECK_THROWS_WITH_AS(pipeline(model, options_for("interleaved", 4, 2, 2)),
                       doctest::Contains("microbatches (2) must be a multiple of stages (4)"), std::invalid_argument);
  // The same message for any m that is not a multiple of p, and the pipeline still builds for one that is.
  CHECK_THROWS_AS(pipeline(model, options_for("interleaved", 4, 6, 2)), std::invalid_argument);
  pipeline ok(model, options_for("interleaved", 4, 4, 2));
  const dataset d = test::small_blobs(16);
  CHECK(std::isfinite(ok.train_step(d.inputs, d.labels, 0)));
}

TEST_CASE("the runtime's peak stash per stage equals the simulator's for every schedule (p=4, m=8)") {
  const dataset d = test::small_blobs(32);
  for (const std::string& sched : schedule_names()) {
    const int chunks = sched == "interleaved" ? 2 : 1;
    pipeline pipe(test::nine_layer_model(), options_for(sched, 4, 8, chunks));
    const simulation sim = simulate(pipe.schedule());
    for (int s = 0; s < 2; ++s) {  // the second step starts from an empty stash too
      pipe.train_step(d.inputs, d.labels, s);
      INFO(sched << " step " << s);
      CHECK(pipe.last_peak_stash() == sim.peak_stash);
    }
  }
}

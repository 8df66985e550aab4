// The schedule as it ran: a step's measured spans and transfers, the costs they imply, the two timelines,
// and the step recorder that keeps only the latest step's events.
#include <doctest/doctest.h>

#include "actors/pipeline.hpp"
#include "pipeline_test_models.hpp"
#include "stage/timeline.hpp"
#include "test_support.hpp"

using namespace ap;

namespace {

// GPipe, 2 stages, 2 microbatches, times in microseconds: F 10 us, B 20 us, transfers of 2 us between stages
// and 15 / 10 us through the coordinator's loss.
std::vector<stage_event> two_stage_step() {
  std::vector<stage_event> e;
  const auto add = [&](double t, int stage, event_kind k, op o, int mb) { e.push_back({t, stage, k, o, 0, mb, stage}); };
  add(0, 0, event_kind::arrive, op::forward, 0), add(0, 0, event_kind::arrive, op::forward, 1);
  add(10, 0, event_kind::start, op::forward, 0), add(20, 0, event_kind::finish, op::forward, 0);
  add(20, 0, event_kind::start, op::forward, 1), add(22, 1, event_kind::arrive, op::forward, 0);
  add(25, 1, event_kind::start, op::forward, 0), add(30, 0, event_kind::finish, op::forward, 1);
  add(32, 1, event_kind::arrive, op::forward, 1), add(35, 1, event_kind::finish, op::forward, 0);
  add(35, 1, event_kind::start, op::forward, 1), add(45, 1, event_kind::finish, op::forward, 1);
  add(50, 1, event_kind::arrive, op::backward, 0), add(50, 1, event_kind::start, op::backward, 0);
  add(55, 1, event_kind::arrive, op::backward, 1), add(70, 1, event_kind::finish, op::backward, 0);
  add(70, 1, event_kind::start, op::backward, 1), add(72, 0, event_kind::arrive, op::backward, 0);
  add(72, 0, event_kind::start, op::backward, 0), add(90, 1, event_kind::finish, op::backward, 1);
  add(92, 0, event_kind::arrive, op::backward, 1), add(92, 0, event_kind::finish, op::backward, 0);
  add(92, 0, event_kind::start, op::backward, 1), add(112, 0, event_kind::finish, op::backward, 1);
  return e;
}

}  // namespace

TEST_CASE("measure_step: real spans, transfers from the producer's end to the arrival, and the costs they imply") {
  const schedule plan = make_gpipe(2, 2);
  const measured_step m = measure_step(two_stage_step(), plan);
  CHECK(m.step == 0);
  CHECK(m.spans.size() == 8);
  CHECK(m.makespan == doctest::Approx(112e-6));
  CHECK(m.busy == doctest::Approx(4 * 10e-6 + 4 * 20e-6));
  REQUIRE(m.transfers.size() == 6);  // 2 forwards into stage 1, 2 gradients from the loss, 2 into stage 0
  double total = 0.0;
  for (const auto& t : m.transfers) total += t.arrived - t.sent;
  CHECK(total == doctest::Approx((2 + 2 + 15 + 10 + 2 + 2) * 1e-6));
  const op_costs c = measured_costs(m, plan);
  for (int s = 0; s < 2; ++s) {
    CHECK(c.forward[s] == doctest::Approx(10e-6));
    CHECK(c.backward_input[s] == doctest::Approx(20e-6));
  }
  CHECK(c.backward_weight == std::vector<double>{0.0, 0.0});
  CHECK(c.transfer == doctest::Approx(5.5e-6));
  const simulation sim = simulate(plan, c);
  // GPipe p=2 m=2 under these costs: (m + p - 1) (F + B) plus the transfers on the critical path.
  CHECK(sim.makespan > 3 * 30e-6);
  const std::string svg = timeline_svg(plan, m, sim);
  CHECK(svg.rfind("<svg", 0) == 0);
  CHECK(test::count_of(svg, "<g><title>") == 16);  // every action, measured and simulated
  CHECK(test::count_of(svg, "stroke=\"#cc0000\" stroke-width=\"2\"><title>") == 6);  // the transfers
  CHECK(svg.find("measured, step 0: makespan 0.11 ms") != std::string::npos);
  CHECK(svg.find("simulated with the measured per-action costs: makespan") != std::string::npos);
}

TEST_CASE("step_recorder keeps the latest step's events only and averages the makespans") {
  step_recorder r;
  auto step0 = two_stage_step();
  for (auto& e : step0) r.add(e);
  for (auto e : step0) {
    e.step = 1;
    e.time_us = 1000 + 2 * e.time_us;  // the second step takes 224 us
    r.add(e);
  }
  CHECK(r.last().size() == step0.size());
  CHECK(r.last().front().step == 1);
  CHECK(r.mean_makespan_s() == doctest::Approx((112 + 224) / 2.0 * 1e-6));
}

TEST_CASE("a real sync-backward step: every action measured, one whole-batch gradient per stage boundary") {
  pipeline_options o = test::pipeline_options_for(3, 4, "sync-backward");
  o.record_events = true;
  pipeline pipe(test::nine_layer_model(), o);
  const dataset d = test::small_blobs(16);
  pipe.train_step(d.inputs, d.labels, 0);
  const measured_step m = measure_step(pipe.events(), pipe.schedule());
  std::size_t actions = 0;
  for (const auto& row : pipe.schedule().per_stage) actions += row.size();
  CHECK(m.spans.size() == actions);
  CHECK(m.transfers.size() == 2 * 4 + 3);  // forwards into stages 1 and 2; one gradient into each stage
  for (const auto& t : m.transfers) CHECK(t.arrived >= t.sent);
  const simulation sim = simulate(pipe.schedule(), measured_costs(m, pipe.schedule()));
  CHECK(sim.makespan > 0.0);
  CHECK(m.makespan >= m.busy / 3);
}

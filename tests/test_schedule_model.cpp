// The schedule generators against their definitions and against the bubble and memory formulas of their papers.
#include <doctest/doctest.h>

#include <algorithm>
#include <stdexcept>

#include "schedule/schedule.hpp"
#include "test_support.hpp"

using namespace ap;

namespace {

op_costs uniform_costs(int stages, double forward, double input, double weight, double transfer = 0.0) {
  op_costs c;
  c.forward.assign(stages, forward);
  c.backward_input.assign(stages, input);
  c.backward_weight.assign(stages, weight);
  c.transfer = transfer;
  return c;
}


// Every (stages, microbatches, chunks) the generators accept in the small range the tests sweep.
std::vector<schedule> all_small_schedules() {
  std::vector<schedule> out;
  for (int p = 1; p <= 4; ++p)
    for (int m = 1; m <= 8; ++m) {
      out.push_back(make_gpipe(p, m));
      out.push_back(make_1f1b(p, m));
      out.push_back(make_zb_h1(p, m));
      for (int v = 1; v <= 3; ++v)
        if (v == 1 || m % p == 0) out.push_back(make_interleaved_1f1b(p, m, v));
    }
  return out;
}

}  // namespace

TEST_CASE("every generator validates for 1..4 stages and 1..8 microbatches") {
  for (const auto& s : all_small_schedules()) {
    CAPTURE(s.name);
    CAPTURE(s.stages);
    CAPTURE(s.microbatches);
    CAPTURE(s.chunks_per_stage);
    const validation v = validate(s);
    CHECK_MESSAGE(v.ok, v.message);
    const int per_microbatch = s.name == "zb-h1" ? 3 : 2;  // F, B  or  F, I, W
    for (const auto& row : s.per_stage)
      CHECK(static_cast<int>(row.size()) == per_microbatch * s.microbatches * s.chunks_per_stage);
  }
}

TEST_CASE("the generators produce the documented orders") {
  CHECK(to_grid(make_gpipe(2, 3)) == "0F0 0F1 0F2 0B0 0B1 0B2\n"
                                          "1F0 1F1 1F2 1B0 1B1 1B2\n");
  CHECK(to_grid(make_1f1b(3, 4)) == "0F0 0F1 0F2 0B0 0F3 0B1 0B2 0B3\n"
                                         "1F0 1F1 1B0 1F2 1B1 1F3 1B2 1B3\n"
                                         "2F0 2B0 2F1 2B1 2F2 2B2 2F3 2B3\n");
  // Chunks 0 and 2 on stage 0, chunks 1 and 3 on stage 1 (Note [chunk layout]); warmup (v-1)*p + p-s-1.
  CHECK(to_grid(make_interleaved_1f1b(2, 2, 2)) == "0F0 0F1 2F0 2F1 2B0 2B1 0B0 0B1\n"
                                                        "1F0 1F1 3F0 3B0 3F1 3B1 1B0 1B1\n");
  // Stage s leaves the W out of its first s steps and runs those W's at the end (Note [zb-h1 order]).
  CHECK(to_grid(make_zb_h1(2, 3)) == "0F0 0F1 0I0 0W0 0F2 0I1 0W1 0I2 0W2\n"
                                          "1F0 1I0 1F1 1I1 1W0 1F2 1I2 1W1 1W2\n");
}

TEST_CASE("interleaved 1F1B with one chunk per stage is 1F1B") {
  for (int p = 1; p <= 4; ++p)
    for (int m = 1; m <= 8; ++m) {
      CAPTURE(p);
      CAPTURE(m);
      CHECK(make_interleaved_1f1b(p, m, 1).per_stage == make_1f1b(p, m).per_stage);
    }
}

TEST_CASE("make_schedule by name, and clear errors for bad parameters") {
  for (const auto& name : schedule_names()) {
    const schedule s = make_schedule(name, 4, 8, name == "interleaved" ? 2 : 1);
    CHECK(s.name == name);
    CHECK(validate(s).ok);
  }
  CHECK(make_schedule("interleaved", 4, 8, 2).chunks_per_stage == 2);
  CHECK_THROWS_WITH_AS(make_schedule("looped-bfs", 2, 2), doctest::Contains("unknown schedule"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(make_schedule("1f1b", 2, 2, 2), doctest::Contains("one chunk per stage"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(make_gpipe(0, 2), doctest::Contains("stages"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(make_1f1b(2, 0), doctest::Contains("microbatches"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(make_interleaved_1f1b(2, 2, 0), doctest::Contains("chunks_per_stage"), std::invalid_argument);
}

TEST_CASE("fewer microbatches than stages: gpipe, 1f1b and zb-h1 work, interleaved says why not") {
  for (const char* name : {"gpipe", "1f1b", "zb-h1"}) {
    CAPTURE(name);
    const schedule s = make_schedule(name, 4, 2);
    CHECK(validate(s).ok);
    CHECK(simulate(s).makespan > 0.0);
  }
  CHECK_THROWS_WITH_AS(make_interleaved_1f1b(4, 2, 2), doctest::Contains("must be a multiple of stages"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(make_interleaved_1f1b(4, 6, 2), doctest::Contains("microbatches (6)"), std::invalid_argument);
}

TEST_CASE("a single stage works for every generator and has no bubble") {
  for (const auto& name : schedule_names()) {
    CAPTURE(name);
    const schedule s = make_schedule(name, 1, 3, name == "interleaved" ? 2 : 1);
    CHECK(validate(s).ok);
    const simulation sim = simulate(s, uniform_costs(1, 1, 1, 1));
    CHECK(sim.makespan == doctest::Approx(9.0));
    CHECK(sim.bubble == doctest::Approx(0.0));
  }
}

// With balanced stages GPipe's and 1F1B's bubble is (p-1)/m of the ideal time. That is exact
// in this simulator for any F and B (not only F = B): the makespan is (m+p-1)(F+B) and the ideal m(F+B),
// for every m, including m < p. GPipe's idle share of the total time is then (p-1)/(m+p-1).
TEST_CASE("GPipe and 1F1B bubbles are exactly (p-1)/m of ideal") {
  for (int p = 1; p <= 4; ++p)
    for (int m = 1; m <= 8; ++m)
      for (const auto& costs : {uniform_costs(p, 1, 1, 1), uniform_costs(p, 1, 0.5, 0.5), uniform_costs(p, 2, 1, 0.5)}) {
        CAPTURE(p);
        CAPTURE(m);
        const double fb = costs.forward[0] + costs.backward_input[0] + costs.backward_weight[0];
        for (const schedule& s : {make_gpipe(p, m), make_1f1b(p, m)}) {
          CAPTURE(s.name);
          const simulation sim = simulate(s, costs);
          CHECK(sim.ideal == doctest::Approx(m * fb));
          CHECK(sim.makespan == doctest::Approx((m + p - 1) * fb));
          CHECK(sim.bubble == doctest::Approx((p - 1.0) / m));
          CHECK(1.0 - sim.ideal / sim.makespan == doctest::Approx((p - 1.0) / (m + p - 1)));
        }
      }
}

// GPipe stashes m activations on every stage; 1F1B stashes min(m, p-s) on stage s, with s
// counted from 0 (the first stage holds the most: p-1 warmup forwards plus the one in flight).
TEST_CASE("peak stash: GPipe holds m, 1F1B holds min(m, p-s)") {
  for (int p = 1; p <= 4; ++p)
    for (int m = 1; m <= 8; ++m) {
      CAPTURE(p);
      CAPTURE(m);
      const simulation gpipe = simulate(make_gpipe(p, m));
      const simulation one_f_one_b = simulate(make_1f1b(p, m));
      for (int s = 0; s < p; ++s) {
        CAPTURE(s);
        CHECK(gpipe.peak_stash[s] == m);
        CHECK(one_f_one_b.peak_stash[s] == std::min(m, p - s));
      }
    }
}

// Megatron-Core's (p-1)/(v*m). Exact here for m a multiple of p (the only case interleaved accepts with v > 1).
TEST_CASE("interleaved 1F1B: bubble (p-1)/(v m), smaller than 1F1B's") {
  for (int p = 2; p <= 4; ++p)
    for (int m = p; m <= 16; m += p)
      for (int v = 2; v <= 4; ++v) {
        CAPTURE(p);
        CAPTURE(m);
        CAPTURE(v);
        const auto costs = uniform_costs(p, 1, 1, 1);
        const simulation interleaved = simulate(make_interleaved_1f1b(p, m, v), costs);
        const simulation one_f_one_b = simulate(make_1f1b(p, m), costs);
        CHECK(interleaved.bubble == doctest::Approx((p - 1.0) / (v * m)));
        CHECK(interleaved.bubble < one_f_one_b.bubble);
      }
}

// The paper's bubble for ZB-H1 is (p-1)(F + I - W) time units, which with F = I = W is a third of 1F1B's
// (p-1)(F + B): the zero-bubble paper's (p-1)/(3m). Exact here once the pipeline reaches a steady state (m >= p).
TEST_CASE("ZB-H1: a third of 1F1B's bubble, with 1F1B's worst-stage stash") {
  const auto unit = uniform_costs(4, 1, 1, 1);
  const simulation zb = simulate(make_zb_h1(4, 8), unit);
  const simulation one_f_one_b = simulate(make_1f1b(4, 8), unit);
  CHECK(zb.bubble >= 0.2 * one_f_one_b.bubble);
  CHECK(zb.bubble <= 0.5 * one_f_one_b.bubble);
  CHECK(*std::max_element(zb.peak_stash.begin(), zb.peak_stash.end()) <=
        *std::max_element(one_f_one_b.peak_stash.begin(), one_f_one_b.peak_stash.end()));

  for (int p = 1; p <= 4; ++p)
    for (int m = p; m <= 8; ++m)
      for (const auto& costs : {uniform_costs(p, 1, 1, 1), uniform_costs(p, 1, 0.5, 0.5), uniform_costs(p, 1, 2, 0.5)}) {
        CAPTURE(p);
        CAPTURE(m);
        const double f = costs.forward[0], i = costs.backward_input[0], w = costs.backward_weight[0];
        const simulation sim = simulate(make_zb_h1(p, m), costs);
        CHECK(sim.makespan - sim.ideal == doctest::Approx((p - 1) * (f + i - w)));
        for (int peak : sim.peak_stash) CHECK(peak <= std::min(m, p));  // every stage <= p (Note [zb-h1 order])
      }
  for (int p = 2; p <= 4; ++p)
    for (int m = 1; m < p; ++m) {  // no steady state: still no worse than 1F1B
      const auto costs = uniform_costs(p, 1, 1, 1);
      CHECK(simulate(make_zb_h1(p, m), costs).bubble <= simulate(make_1f1b(p, m), costs).bubble);
    }
}

TEST_CASE("simulate: transfers, chunk costs, per-stage costs and spans") {
  // 1F1B on 2 stages, 1 microbatch: F on stage 0, transfer, F and B on stage 1, transfer, B on stage 0.
  const simulation two = simulate(make_1f1b(2, 1), uniform_costs(2, 1, 1, 1, 0.5));
  CHECK(two.makespan == doctest::Approx(1 + 0.5 + 1 + 2 + 0.5 + 2));
  CHECK(two.ideal == doctest::Approx(3.0));

  // A chunk is 1/v of its stage: one stage with two chunks costs as much as one chunk.
  CHECK(simulate(make_interleaved_1f1b(1, 1, 2), uniform_costs(1, 1, 1, 1)).makespan == doctest::Approx(3.0));
  // Chunks on the same stage never pay the transfer.
  CHECK(simulate(make_interleaved_1f1b(1, 1, 2), uniform_costs(1, 1, 1, 1, 10.0)).makespan == doctest::Approx(3.0));

  // Default costs are 1.0 everywhere: B = I + W = 2.
  CHECK(simulate(make_1f1b(1, 2)).makespan == doctest::Approx(6.0));

  // Unbalanced stages: the slow stage sets the pace.
  op_costs slow_last;
  slow_last.forward = {1, 3};
  slow_last.backward_input = {1, 3};
  slow_last.backward_weight = {0, 0};
  const simulation uneven = simulate(make_gpipe(2, 2), slow_last);
  CHECK(uneven.ideal == doctest::Approx(2 * 8 / 2.0));
  CHECK(uneven.makespan == doctest::Approx(1 + 3 + 3 + 3 + 3 + 1));

  CHECK_THROWS_WITH_AS(simulate(make_1f1b(2, 2), uniform_costs(3, 1, 1, 1)), doctest::Contains("3 entries for 2 stages"),
                       std::invalid_argument);

  // Every action has a span; spans on a stage follow its list and never overlap; durations are the costs.
  const schedule s = make_interleaved_1f1b(4, 8, 2);
  const simulation sim = simulate(s, uniform_costs(4, 1, 1, 1, 0.25));
  std::size_t actions = 0;
  for (const auto& row : s.per_stage) actions += row.size();
  REQUIRE(sim.spans.size() == actions);
  std::vector<std::size_t> next(4, 0);
  std::vector<double> last_end(4, 0.0);
  for (const auto& span : sim.spans) {
    CHECK(span.a == s.per_stage[span.stage][next[span.stage]++]);
    CHECK(span.start >= last_end[span.stage] - 1e-12);
    CHECK(span.end - span.start == doctest::Approx(span.a.kind == op::forward ? 0.5 : 1.0));
    last_end[span.stage] = span.end;
  }
}

TEST_CASE("simulate refuses an invalid schedule with the validator's message") {
  schedule s = make_1f1b(2, 2);
  s.per_stage[1].pop_back();
  CHECK_THROWS_WITH_AS(simulate(s), doctest::Contains("ERROR HERE"), std::invalid_argument);
}

TEST_CASE("to_svg draws one box per action with its label") {
  const schedule s = make_zb_h1(4, 8);
  const simulation sim = simulate(s);
  const std::string svg = to_svg(s, sim);
  CHECK(svg.rfind("<svg", 0) == 0);
  CHECK(svg.find("</svg>") != std::string::npos);
  CHECK(test::count_of(svg, "<g><title>") == sim.spans.size());
  CHECK(svg.find(">F3</text>") != std::string::npos);
  CHECK(svg.find(">W7</text>") != std::string::npos);
  CHECK(svg.find("stage 3") != std::string::npos);
}

// The forwards pipeline as GPipe's; the backward is one whole-batch B per stage, last
// stage first, so it takes p * m * B after the last forward: makespan (m + p - 1) F + p m B, and every stage
// holds all m activations until its backward (Note [sync-backward]).
TEST_CASE("sync-backward: pipelined forwards, then one whole-batch backward per stage, last to first") {
  const schedule s = make_schedule("sync-backward", 3, 4);
  CHECK(validate(s).ok);
  CHECK(whole_batch_backward(s));
  CHECK_FALSE(whole_batch_backward(make_gpipe(3, 4)));
  for (const auto& row : s.per_stage) {
    REQUIRE(row.size() == 5);
    CHECK(row.back().kind == op::backward);
    CHECK(row.back().microbatch == all_microbatches);
  }
  for (int p = 1; p <= 4; ++p)
    for (int m = 1; m <= 8; ++m) {
      CAPTURE(p);
      CAPTURE(m);
      const simulation sim = simulate(make_sync_backward(p, m), uniform_costs(p, 1, 1, 1));
      CHECK(sim.makespan == doctest::Approx((m + p - 1) * 1.0 + p * m * 2.0));
      CHECK(sim.peak_stash == std::vector<int>(static_cast<std::size_t>(p), m));
      // Slower than GPipe (same forwards, backwards pipelined) as soon as there are two stages and two microbatches.
      if (p > 1 && m > 1) CHECK(sim.makespan > simulate(make_gpipe(p, m), uniform_costs(p, 1, 1, 1)).makespan);
    }
  // The backward spans: stage p-1's starts when its last forward ends; stage s's when stage s+1's ends.
  const simulation sim = simulate(s, uniform_costs(3, 1, 1, 1));
  std::vector<double> backward_start(3);
  for (const auto& span : sim.spans)
    if (span.a.kind == op::backward) backward_start[span.stage] = span.start;
  CHECK(backward_start == std::vector<double>{6.0 + 16.0, 6.0 + 8.0, 6.0});
}

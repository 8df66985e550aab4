// Gradient reductions as schedule actions (Note [gradient reduction]): R prints and parses as "0R", goes
// right after each chunk's last backward, is checked by the validator, and runs on the simulator's
// communication lane, where it overlaps the stage's remaining compute.
#include <doctest/doctest.h>

#include <stdexcept>

#include "equivalence.hpp"
#include "schedule/schedule.hpp"
#include "test_support.hpp"

using namespace ap;
using namespace ap::test;

namespace {

// Validates a hand-written grid: refused for `reason`, with the grid printed and the failing step marked.
void check_rejected(const std::string& grid, const std::string& reason, const std::string& marked = "") {
  CAPTURE(grid);
  test::check_refused(
      [&] {
        const validation v = validate(parse_grid(grid));
        if (!v.ok) throw std::invalid_argument(v.message);
      },
      {"ERROR HERE", reason, marked});
}

double span_start(const simulation& sim, const std::string& action_text, int stage) {
  for (const auto& s : sim.spans)
    if (s.stage == stage && to_string(s.a) == action_text) return s.start;
  FAIL("no span " << action_text << " on stage " << stage);
  return -1;
}

double span_end(const simulation& sim, const std::string& action_text, int stage) {
  for (const auto& s : sim.spans)
    if (s.stage == stage && to_string(s.a) == action_text) return s.end;
  FAIL("no span " << action_text << " on stage " << stage);
  return -1;
}

}  // namespace

TEST_CASE("R prints as <chunk>R, parses back, and travels through grids and CSV") {
  const action r = parse_action("3R", 1);
  CHECK(r.kind == op::reduce_grad);
  CHECK(r.chunk == 3);
  CHECK(r.microbatch == all_microbatches);
  CHECK(to_string(r) == "3R");
  CHECK(contains(error_of([] { parse_action("3R0", 1); }), "a gradient reduction R takes no microbatch"));
  CHECK(contains(error_of([] { parse_action("3X0", 1); }), "expected F, B, I, W or R"));
  const schedule s = with_gradient_reductions(make_zb_h1(2, 3));
  CHECK(to_grid(parse_grid(to_grid(s))) == to_grid(s));
  CHECK(contains(to_csv(s), "0,9,R,*,0\n"));
  CHECK(to_grid(parse_csv(to_csv(s))) == to_grid(s));
  CHECK(contains(error_of([] { parse_csv("stage,step,op,microbatch,chunk\n0,0,R,0,0\n"); }), "its microbatch is '*'"));
  CHECK_FALSE(whole_batch_backward(s));  // R's '*' is not a whole-batch backward
}

TEST_CASE("with_gradient_reductions puts one R right after each chunk's last backward, and is idempotent") {
  CHECK(to_grid(with_gradient_reductions(make_gpipe(2, 3))) == "0F0 0F1 0F2 0B0 0B1 0B2 0R\n"
                                                                  "1F0 1F1 1F2 1B0 1B1 1B2 1R\n");
  CHECK(to_grid(with_gradient_reductions(make_1f1b(2, 3))) == "0F0 0F1 0B0 0F2 0B1 0B2 0R\n"
                                                                 "1F0 1B0 1F1 1B1 1F2 1B2 1R\n");
  // Interleaved: chunk 2's gradients are final long before chunk 0's, and its R goes there.
  CHECK(to_grid(with_gradient_reductions(make_interleaved_1f1b(2, 2, 2))) ==
        "0F0 0F1 2F0 2F1 2B0 2B1 2R 0B0 0B1 0R\n"
        "1F0 1F1 3F0 3B0 3F1 3B1 3R 1B0 1B1 1R\n");
  // Zero bubble: after the chunk's last W, not its last I.
  CHECK(to_grid(with_gradient_reductions(make_zb_h1(2, 3))) == "0F0 0F1 0I0 0W0 0F2 0I1 0W1 0I2 0W2 0R\n"
                                                                  "1F0 1I0 1F1 1I1 1W0 1F2 1I2 1W1 1W2 1R\n");
  const schedule once = with_gradient_reductions(make_interleaved_1f1b(2, 4, 2));
  CHECK(to_grid(with_gradient_reductions(once)) == to_grid(once));
  CHECK(has_gradient_reductions(once));
  CHECK_FALSE(has_gradient_reductions(make_interleaved_1f1b(2, 4, 2)));
  for (const schedule& s : {with_gradient_reductions(make_gpipe(3, 5)), with_gradient_reductions(make_1f1b(4, 8)),
                            with_gradient_reductions(make_zb_h1(3, 6)), with_gradient_reductions(make_sync_backward(2, 3)),
                            once})
    CHECK(validate(s).ok);
}

TEST_CASE("the validator: no R, or one per chunk after every backward of the chunk") {
  check_rejected("0F0 0F1 0B0 0B1 0R\n1F0 1B0 1F1 1B1\n", "missing action: the gradient reduction R of chunk 1");
  check_rejected("0F0 0I0 0R 0W0\n1F0 1I0 1W0 1R\n", "runs before the weight gradient (B or W) of microbatch 0",
                 "stage 0: 0F0 0I0 [0R] 0W0  <-- ERROR HERE");
  check_rejected("0F0 0B0 0R 0R\n1F0 1B0 1R\n", "is a duplicate: chunk 0's gradients are already reduced");
  check_rejected("0F0 0B0 0R 1R\n1F0 1B0\n", "is on the wrong stage");
}

TEST_CASE("the simulator runs R on the stage's communication lane: hidden under compute, or at the step's end") {
  op_costs costs;
  costs.reduce_grad = 0.5;
  const schedule plain = make_1f1b(2, 4);
  const schedule reduced = with_gradient_reductions(plain);
  const simulation base = simulate(plain), sim = simulate(reduced, costs);
  // Stage 1 finishes its backwards first; its R (0.5) ends before stage 0's last backward, which is the end
  // of the step, and stage 0's own R comes after it.
  CHECK(span_end(sim, "1R", 1) < span_end(sim, "0B3", 0));
  CHECK(sim.makespan == doctest::Approx(base.makespan + 0.5));
  // Interleaved: chunk 2's R overlaps chunk 0's backwards on the same stage (the next action starts at once).
  const simulation inter = simulate(with_gradient_reductions(make_interleaved_1f1b(2, 2, 2)), costs);
  CHECK(span_start(inter, "0B0", 0) == doctest::Approx(span_start(inter, "2R", 0)));
  CHECK(span_end(inter, "2R", 0) > span_start(inter, "0B0", 0));
  // A reduction longer than the rest of the step decides the makespan.
  costs.reduce_grad = 100.0;
  const simulation slow = simulate(reduced, costs);
  CHECK(slow.makespan == doctest::Approx(span_end(slow, "0B3", 0) + 100.0));
  CHECK(span_end(slow, "1R", 1) == doctest::Approx(span_end(slow, "1B3", 1) + 100.0));
  CHECK(slow.peak_stash == base.peak_stash);
}

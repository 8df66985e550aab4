// The validator catches each kind of broken schedule and marks the failing step in the printed grid.
#include <doctest/doctest.h>

#include <stdexcept>

#include "equivalence.hpp"
#include "schedule/schedule.hpp"

using namespace ap;

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

}  // namespace

TEST_CASE("a valid hand-written grid passes") {
  const validation v = validate(parse_grid("0F0 0F1 0B0 0B1\n1F0 1B0 1F1 1B1\n"));
  CHECK(v.ok);
  CHECK(v.message.empty());
}

TEST_CASE("the validator catches a backward before its forward") {
  check_rejected("0F0 0F1 0B0 0B1\n1B0 1F0 1F1 1B1\n", "before its forward",
                 "stage 1: [1B0] 1F0 1F1 1B1  <-- ERROR HERE");
}

TEST_CASE("the validator catches a missing action") {
  check_rejected("0F0 0F1 0B0 0B1\n1F0 1B0 1F1\n", "missing action: the backward (B, or I and W) of microbatch 1, chunk 1",
                 "stage 1: 1F0 1B0 1F1  <-- ERROR HERE");
  check_rejected("0F0 0B0\n1F0 1I0\n", "missing action: the weight gradient W");
}

TEST_CASE("the validator catches a duplicate") {
  check_rejected("0F0 0F1 0F1 0B0 0B1\n1F0 1B0 1F1 1B1\n", "duplicate", "0F0 0F1 [0F1]");
  check_rejected("0F0 0I0 0W0 0W0\n", "duplicate", "[0W0]");
}

TEST_CASE("the validator catches an action on the wrong stage") {
  check_rejected("0F0 0F1 1F0 0B0 0B1\n1F1 1B0 1B1\n", "wrong stage: chunk 1 lives on stage 1", "[1F0]");
  // The stage field of a hand-built action must match its row.
  schedule s = make_1f1b(2, 1);
  s.per_stage[0][0].stage = 1;
  const validation v = validate(s);
  CHECK_FALSE(v.ok);
  CHECK(v.message.find("sits in stage 0") != std::string::npos);
  CHECK(v.message.find("ERROR HERE") != std::string::npos);
}

TEST_CASE("the validator catches a cross-stage deadlock") {
  // Stage 0 wants B0 before F1; stage 1 wants F1 (which needs stage 0's F1) before B0.
  check_rejected("0F0 0B0 0F1 0B1\n1F0 1F1 1B0 1B1\n", "deadlock", "stage 0: 0F0 [0B0] 0F1 0B1  <-- ERROR HERE");
  const validation v = validate(parse_grid("0F0 0B0 0F1 0B1\n1F0 1F1 1B0 1B1\n"));
  CHECK(v.message.find("stage 1: 1F0 [1F1] 1B0 1B1  <-- ERROR HERE") != std::string::npos);
  CHECK(v.message.find("waits for the forward of microbatch 1, chunk 0 on stage 0") != std::string::npos);
  // Interleaved chunks wrap from the last stage to the first: chunk 2 (stage 0) after chunk 1 (stage 1).
  check_rejected("0F0 2F0 2B0 0B0\n1B0 1F0 3F0 3B0\n", "before its forward");
  check_rejected("0F0 2F0 2B0 0B0\n3F0 1F0 3B0 1B0\n", "deadlock");
}

TEST_CASE("the validator catches W before I") {
  check_rejected("0F0 0W0 0I0\n", "before its input gradient (I before W)", "stage 0: 0F0 [0W0] 0I0  <-- ERROR HERE");
  check_rejected("0F0 0B0 0W0\n", "mixes a W with a full backward B");
}

TEST_CASE("the validator checks the declared sizes") {
  schedule s = make_gpipe(2, 2);
  s.stages = 3;
  CHECK(validate(s).message.find("declares 3 stages but has 2 rows") != std::string::npos);
  s = make_gpipe(2, 2);
  s.microbatches = 1;
  CHECK(validate(s).message.find("microbatch out of range") != std::string::npos);
  s = make_gpipe(2, 2);
  s.microbatches = 3;  // microbatch 2 never runs
  CHECK(validate(s).message.find("missing action: the forward F of microbatch 2") != std::string::npos);
}

TEST_CASE("the whole-batch backward: valid alone, refused mixed with per-microbatch backwards or before a forward") {
  CHECK(validate(parse_grid("0F0 0F1 0B*\n1F0 1F1 1B*\n")).ok);
  check_rejected("0F0 0F1 0B0 0B1\n1F0 1F1 1B*\n", "per-microbatch backward in a schedule with whole-batch",
                 "stage 0: 0F0 0F1 [0B0] 0B1  <-- ERROR HERE");
  check_rejected("0F0 0B* 0F1\n1F0 1F1 1B*\n", "runs before the forward of microbatch 1",
                 "stage 0: 0F0 [0B*] 0F1  <-- ERROR HERE");
  check_rejected("0F0 0F1 0B* 0B*\n1F0 1F1 1B*\n", "duplicate");
  // Stage 0's backward needs stage 1's, which waits behind stage 1's forward of microbatch 1 ... that stage 0 never sent.
  check_rejected("0F0 0B* 0F1\n1F0 1F1 1B*\n", "before the forward");
}

TEST_CASE("validate_for_run: a schedule of other sizes than the run's is refused naming both, with the grid") {
  const schedule s = make_1f1b(2, 4);
  CHECK(validate_for_run(s, 2, 4, 1).ok);
  for (const auto& [v, text] : {std::pair{validate_for_run(s, 3, 4, 1), "2 stages, the run --stages 3"},
                                std::pair{validate_for_run(s, 2, 8, 1), "4 microbatches, the run --microbatches 8"},
                                std::pair{validate_for_run(s, 2, 4, 2), "1 chunks per stage, the run --chunks 2"}}) {
    CHECK_FALSE(v.ok);
    CHECK(v.message.find(text) != std::string::npos);
    CHECK(v.message.find("stage 1: 1F0 1B0 1F1 1B1") != std::string::npos);
  }
}

// Schedules as text: actions, grids and CSV round-trip exactly, and bad text names its line and token.
#include <doctest/doctest.h>

#include <algorithm>
#include <stdexcept>

#include "schedule/schedule.hpp"

using namespace ap;

namespace {

std::vector<schedule> some_schedules() {
  std::vector<schedule> out;
  for (int p = 1; p <= 4; ++p)
    for (int m = 1; m <= 8; ++m) {
      out.push_back(make_gpipe(p, m));
      out.push_back(make_1f1b(p, m));
      out.push_back(make_zb_h1(p, m));
      if (m % p == 0) out.push_back(make_interleaved_1f1b(p, m, 3));
    }
  out.push_back(make_interleaved_1f1b(4, 12, 4));  // chunk and microbatch numbers of two digits
  return out;
}

void check_same(const schedule& a, const schedule& b) {
  CHECK(a.stages == b.stages);
  CHECK(a.microbatches == b.microbatches);
  CHECK(a.chunks_per_stage == b.chunks_per_stage);
  CHECK(a.per_stage == b.per_stage);
}

}  // namespace

TEST_CASE("actions print as <chunk><op><microbatch> and parse back") {
  CHECK(to_string(action{1, op::forward, 0, 1}) == "1F0");
  CHECK(to_string(action{2, op::backward_weight, 345, 12}) == "12W345");
  for (const char* text : {"0F0", "1B7", "3I2", "12W345"}) CHECK(to_string(parse_action(text, 0)) == text);
  const action a = parse_action("5I3", 1);
  CHECK(a == action{1, op::backward_input, 3, 5});
  for (const char* bad : {"", "F0", "1X0", "1F", "1F0x", "-1F0", "1 F0", "1f0", "1F99999999999"}) {
    CAPTURE(bad);
    CHECK_THROWS_AS(parse_action(bad, 0), std::invalid_argument);
  }
  CHECK_THROWS_WITH(parse_action("1X0", 0), doctest::Contains("unknown op letter 'X'"));
}

TEST_CASE("grid round trip is exact, and the sizes are inferred") {
  for (const auto& s : some_schedules()) {
    CAPTURE(to_grid(s));
    const schedule back = parse_grid(to_grid(s), s.name);
    check_same(back, s);
    CHECK(back.name == s.name);
    CHECK(to_grid(back) == to_grid(s));
  }
  CHECK(parse_grid("0F0 0B0\n").name == "custom");
}

TEST_CASE("grid text: comments, blank endings and CRLF are accepted") {
  const schedule s = parse_grid("# 1F1B on two stages\r\n0F0 0F1 0B0 0B1\r\n  1F0 1B0   1F1 1B1  \r\n\n\n");
  check_same(s, make_1f1b(2, 2));
}

TEST_CASE("bad grids name the line and the token") {
  CHECK_THROWS_WITH_AS(parse_grid("0F0 0F1 0B0 0B1\n1F0 1Q1 1B0 1B1\n"),
                       doctest::Contains("line 2 (stage 1), token '1Q1'"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(parse_grid("# only a comment\n\n"), doctest::Contains("empty"), std::invalid_argument);
}

TEST_CASE("CSV round trip is exact, rows may come in any order") {
  for (const auto& s : some_schedules()) {
    const std::string csv = to_csv(s);
    CHECK(csv.rfind("stage,step,op,microbatch,chunk\n", 0) == 0);
    check_same(parse_csv(csv, s.name), s);
  }
  const schedule s = make_zb_h1(3, 4);
  std::string csv = to_csv(s);
  std::vector<std::string> rows;
  std::size_t start = csv.find('\n') + 1;
  for (std::size_t end; (end = csv.find('\n', start)) != std::string::npos; start = end + 1)
    rows.push_back(csv.substr(start, end - start));
  std::reverse(rows.begin(), rows.end());
  std::string shuffled = "stage,step,op,microbatch,chunk\r\n";
  for (const auto& r : rows) shuffled += r + "\r\n";
  check_same(parse_csv(shuffled), s);
  CHECK(to_csv(make_1f1b(2, 1)) == "stage,step,op,microbatch,chunk\n0,0,F,0,0\n0,1,B,0,0\n1,0,F,0,1\n1,1,B,0,1\n");
}

TEST_CASE("bad CSV names the line and the field") {
  const std::string header = "stage,step,op,microbatch,chunk\n";
  CHECK_THROWS_WITH_AS(parse_csv("stage,op\n0,F\n"), doctest::Contains("line 1: expected the header"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(parse_csv(header + "0,0,F,0,0\n0,1,X,0,0\n"), doctest::Contains("line 3: op 'X'"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(parse_csv(header + "0,0,F,zero,0\n"), doctest::Contains("line 2: microbatch 'zero'"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(parse_csv(header + "0,0,F,0,0\n0,0,B,0,0\n"), doctest::Contains("line 3: stage 0 step 0 appears twice"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(parse_csv(header + "0,0,F,0,0\n0,2,B,0,0\n"), doctest::Contains("has no step 1"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(parse_csv(header + "0,0,F,0\n"), doctest::Contains("line 2: expected 5 fields"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(parse_csv(header + "0,0,F,0,\n"), doctest::Contains("chunk ''"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(parse_csv(header), doctest::Contains("no actions"), std::invalid_argument);
}

TEST_CASE("a whole-batch backward prints as 0B* and round-trips through grid and CSV, only B and R take *") {
  const schedule s = make_sync_backward(2, 3);
  CHECK(to_grid(s) == "0F0 0F1 0F2 0B*\n1F0 1F1 1F2 1B*\n");
  CHECK(parse_grid(to_grid(s)).per_stage == s.per_stage);
  CHECK(parse_grid(to_grid(s)).microbatches == 3);
  CHECK(to_csv(s).find("0,3,B,*,0\n") != std::string::npos);
  CHECK(parse_csv(to_csv(s)).per_stage == s.per_stage);
  CHECK(parse_action("1B*", 1) == action{1, op::backward, all_microbatches, 1});
  CHECK_THROWS_WITH_AS(parse_action("1F*", 1), doctest::Contains("only a full backward B"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(parse_csv("stage,step,op,microbatch,chunk\n0,0,W,*,0\n"),
                       doctest::Contains("is for a full backward B or R only"), std::invalid_argument);
}

// examples/transformer_pipeline.cpp, the seed's Transformer example, at --small (its shape at width 64): 28 layers
// in 8 chunks over 4 stages (chunk c on stage c % 4), a vocabulary of 50,000, and a loss that falls.
#include <doctest/doctest.h>

#include <chrono>
#include <cmath>
#include <string>
#include <vector>

#include "cli_runs.hpp"
#include "node_process.hpp"
#include "test_support.hpp"

using namespace ap::test;
using namespace std::chrono_literals;

TEST_CASE("the seed's Transformer example trains its shape on 4 stages x 2 chunks with a vocabulary of 50,000") {
  const std::string example = std::string(AP_BINARY_DIR) + "/examples/example_transformer_pipeline";
  const program_run run = run_program({example, "--small", "--steps", "3"});
  const std::vector<std::string>& lines = run.lines;
  INFO(run.err);
  REQUIRE(run.code == 0);
  REQUIRE(lines.size() >= 1 + 8 + 3);
  CHECK(contains(lines[0], "gpt:layers=24,dim=64,heads=4,vocab=50000,context=32"));
  CHECK(lines[1] == "chunk 0 on stage 0: layers 0..3");
  CHECK(lines[8] == "chunk 7 on stage 3: layers 25..27");
  std::vector<double> losses;
  for (int s = 0; s < 3; ++s) {
    const std::string& l = lines[9 + static_cast<std::size_t>(s)];
    REQUIRE(contains(l, "step " + std::to_string(s) + ": loss "));
    losses.push_back(std::stod(l.substr(l.find("loss ") + 5)));
  }
  CHECK(std::abs(losses[0] - std::log(50000.0)) < 1.5);  // near the uniform guess over 50,000 tokens
  CHECK(losses[2] < losses[0]);
}

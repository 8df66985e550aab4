// Note [memory model]: a stage's predicted peak from the plan (parameters, gradients, optimizer state, stash),
// memory sizes as the user writes them, and the budget's refusal naming the stage, its figure and what fits.
#include <doctest/doctest.h>

#include <stdexcept>
#include <string>

#include "plan/memory_model.hpp"
#include "plan/stage_info.hpp"
#include "test_support.hpp"

using namespace ap;

TEST_CASE("predict_stage_memory: parameters x (4 + 4 + optimizer state) and peak in flight x the largest chunk stash") {
  sequential model = sequential::from_spec("10-20-5", sequential_options{"relu", 1});  // linear, relu, linear
  // Linear(10->20): 220 parameters; Linear(20->5): 105.
  const std::vector<std::uint64_t> stash = {400, 800, 160};
  optimizer_config adam;
  adam.kind = "adam";
  const auto two = predict_stage_memory(model, chunk_ranges_from_counts({2, 1}, 3), 2, stash, {2, 1}, adam);
  REQUIRE(two.size() == 2);
  CHECK(two[0].parameters == 4 * 220);
  CHECK(two[0].gradients == 4 * 220);
  CHECK(two[0].optimizer_state == 8 * 220);
  CHECK(two[0].stash_per_activation == 1200);
  CHECK(two[0].stash == 2 * 1200);
  CHECK(two[1].parameters == 4 * 105);
  CHECK(two[1].stash == 160);
  CHECK(two[1].total() == 4 * 105 * 2 + 8 * 105 + 160);
  // Interleaved: stage 0 holds chunks 0 and 2 and counts its larger chunk per activation.
  optimizer_config sgd;
  sgd.kind = "sgd";
  const auto chunks = predict_stage_memory(model, chunk_ranges_from_counts({1, 1, 1}, 3), 2, stash, {3, 2}, sgd);
  CHECK(chunks[0].stash_per_activation == 400);
  CHECK(chunks[0].optimizer_state == 0);
  sgd.momentum = 0.9f;
  CHECK(optimizer_state_bytes(sgd) == 4);
  CHECK_THROWS_AS(predict_stage_memory(model, chunk_ranges_from_counts({2, 1}, 3), 2, stash, {2}, adam),
                  std::invalid_argument);
}

TEST_CASE("memory sizes: bytes, K/M/G/T with or without B or iB; anything else refused naming the text") {
  CHECK(parse_memory_size("1048576") == 1048576);
  CHECK(parse_memory_size("512M") == 512ull << 20);
  CHECK(parse_memory_size("2G") == 2ull << 30);
  CHECK(parse_memory_size("1.5GB") == 3ull << 29);
  CHECK(parse_memory_size("300MiB") == 300ull << 20);
  CHECK(parse_memory_size("64k") == 64ull << 10);
  for (const char* bad : {"", "lots", "2X", "-1G", "0"}) {
    CAPTURE(bad);
    const std::string expected = "memory size '" + std::string(bad) + "'";
    CHECK_THROWS_WITH_AS(parse_memory_size(bad), doctest::Contains(expected.c_str()), std::invalid_argument);
  }
  CHECK(memory_text(88080384) == "84.0 MB");
  CHECK(memory_text(512) == "512 B");
}

TEST_CASE("over_budget names the first stage over it, its parts, and what would fit; nothing when all fit") {
  stage_memory small, big;
  small.parameters = small.gradients = 1 << 20;
  big.parameters = big.gradients = 1 << 20;
  big.optimizer_state = 2 << 20;
  big.in_flight = 4;
  big.stash_per_activation = 10 << 20;
  big.stash = 40 << 20;
  CHECK(over_budget({small, big}, 64ull << 20).empty());
  const std::string text = over_budget({small, big}, 32ull << 20);
  CHECK(test::contains(text, "stage 1 needs about 44.0 MB, over --max-memory 32.0 MB"));
  CHECK(test::contains(text, "stash 4 x 10.0 MB"));
  CHECK(test::contains(text, "--recompute blocks"));
  CHECK(test::contains(text, "more stages"));
}

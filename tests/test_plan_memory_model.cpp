// A stage's predicted peak from the plan (parameters, gradients, optimizer state, stash), memory sizes as the user
// writes them, and the budget's refusal naming the stage, its figure and what fits (Note [memory model]).
#include <doctest/doctest.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "model/tensor_parallel.hpp"
#include "plan/memory_model.hpp"
#include "plan/stage_info.hpp"
#include "tensor/matmul.hpp"
#include "tensor/tensor_memory.hpp"
#include "test_support.hpp"

using namespace ap;

TEST_CASE("predict_stage_memory: parameters x (4 + 4 + optimizer state), and the stash along each stage's actions") {
  sequential model = sequential::from_spec("10-20-5", sequential_options{"relu", 1});  // linear, relu, linear
  // Linear(10->20): 220 parameters; Linear(20->5): 105. Chunk 0 = layers 0-1 (1200 bytes), chunk 1 = layer 2.
  const std::vector<std::uint64_t> stash = {400, 800, 160};
  optimizer_config adam;
  adam.kind = "adam";
  const auto ranges = chunk_ranges_from_counts({2, 1}, 3);
  const auto two = predict_stage_memory(model, ranges, make_schedule("1f1b", 2, 2), stash, adam);
  REQUIRE(two.size() == 2);
  CHECK(two[0].parameters == 4 * 220);
  CHECK(two[0].gradients == 4 * 220);
  CHECK(two[0].optimizer_state == 8 * 220);
  CHECK(two[0].stash == 2 * 1200);  // 1F1B on 2 stages: stage 0 holds both microbatches before its first B
  CHECK(two[0].in_flight == 2);
  CHECK(two[1].parameters == 4 * 105);
  CHECK(two[1].stash == 160);
  CHECK(two[1].total() == 4 * 105 * 2 + 8 * 105 + 160);
  const auto gpipe = predict_stage_memory(model, ranges, make_schedule("gpipe", 2, 4), stash, adam);
  CHECK(gpipe[1].stash == 4 * 160);  // GPipe: every microbatch
  optimizer_config sgd;
  sgd.kind = "sgd";
  CHECK(predict_stage_memory(model, ranges, make_schedule("1f1b", 2, 2), stash, sgd)[0].optimizer_state == 0);
  sgd.momentum = 0.9f;
  CHECK(optimizer_state_bytes(sgd) == 4);
  CHECK_THROWS_AS(predict_stage_memory(model, ranges, make_schedule("1f1b", 3, 2), stash, adam), std::invalid_argument);
}

TEST_CASE("stash_peaks walks each stage's own actions: F adds its chunk's stash, B or W takes it away, I keeps it") {
  schedule s;
  s.stages = 2;
  s.chunks_per_stage = 2;
  s.microbatches = 2;
  const auto a = [](int stage, op kind, int mb, int chunk) { return action{stage, kind, mb, chunk}; };
  s.per_stage = {{a(0, op::forward, 0, 0), a(0, op::forward, 0, 2), a(0, op::forward, 1, 0), a(0, op::backward, 0, 2),
                  a(0, op::forward, 1, 2), a(0, op::backward, 1, 2), a(0, op::backward, 0, 0), a(0, op::backward, 1, 0)},
                 {a(1, op::forward, 0, 1), a(1, op::forward, 0, 3), a(1, op::backward, 0, 3), a(1, op::forward, 1, 1),
                  a(1, op::backward_input, 0, 1), a(1, op::backward_weight, 0, 1), a(1, op::backward_input, 1, 1),
                  a(1, op::backward_weight, 1, 1)}};
  const auto peaks = stash_peaks(s, {400, 800, 500, 160});
  REQUIRE(peaks.size() == 2);
  CHECK(peaks[0].bytes == 1300);  // 400 + 500 + 400: chunk 0 twice and chunk 2 once, not 3 x the largest
  CHECK(peaks[0].activations == 3);
  CHECK(peaks[1].bytes == 1600);  // both microbatches of chunk 1: an I keeps its activation until its W
  CHECK(peaks[1].activations == 2);
  // Between its I and its W a microbatch of chunk 1 holds 1000 bytes instead of its 800 (its layers' dy's).
  const auto held = stash_peaks(s, {400, 800, 500, 160}, {400, 1000, 500, 160});
  CHECK(held[0].bytes == 1300);  // stage 0 runs no I
  CHECK(held[1].bytes == 1800);  // 800 + 1000 after the first I, before its W
  CHECK(held[1].activations == 2);
}

TEST_CASE("memory sizes: bytes, K/M/G/T with or without B or iB, anything else refused naming the text") {
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

TEST_CASE("over_budget names the first process or node over it, its stages' parts, and what would fit") {
  stage_memory small, big;
  small.parameters = small.gradients = 1 << 20;
  big.parameters = big.gradients = 1 << 20;
  big.optimizer_state = 2 << 20;
  big.in_flight = 4;
  big.stash = 40 << 20;
  const auto here = memory_holders(2, 1, {});  // both stages in this process: 2 + 44 MB
  CHECK(over_budget({small, big}, here, 64ull << 20).empty());
  const std::string text = over_budget({small, big}, here, 32ull << 20);
  CHECK(test::contains(text, "this process needs about 46.0 MB, over --max-memory 32.0 MB: stage 0 2.0 MB"));
  CHECK(test::contains(text, "stage 1 44.0 MB (weights 1.0 MB, gradients 1.0 MB, optimizer state 2.0 MB, stash 40.0 MB at 4 "
                             "activations in flight, workspace 0 B)"));
  CHECK(test::contains(text, "--recompute blocks"));
  CHECK(test::contains(text, "more stages or nodes"));
  // On two nodes each holds one stage: only the second is over 32 MB.
  const auto nodes = memory_holders(2, 1, {"a:1", "b:2"});
  const std::string on_nodes = over_budget({small, big}, nodes, 32ull << 20);
  CHECK(test::contains(on_nodes, "node b:2 needs about 44.0 MB"));
  CHECK(over_budget({small, big}, nodes, 45ull << 20).empty());
}

TEST_CASE("a stage's workspace is its largest layer's, on top of its stash, measured as the layer's tensors rose") {
  sequential model = sequential::from_spec("10-20-5", sequential_options{"relu", 1});  // linear, relu, linear
  const std::vector<std::uint64_t> stash = {400, 800, 160}, held = {}, workspace = {3000, 700, 900};
  optimizer_config sgd;
  sgd.kind = "sgd";
  const auto ranges = chunk_ranges_from_counts({2, 1}, 3);
  const auto two = predict_stage_memory(model, ranges, make_schedule("gpipe", 2, 2), stash, sgd, held, workspace);
  CHECK(two[0].workspace == 3000);  // layers 0 and 1: the larger
  CHECK(two[1].workspace == 900);
  CHECK(two[0].total() == 4 * 220 * 2 + 2 * 1200 + 3000);
  CHECK(predict_stage_memory(model, ranges, make_schedule("gpipe", 2, 2), stash, sgd)[0].workspace == 0);
  CHECK_THROWS_AS(predict_stage_memory(model, ranges, make_schedule("gpipe", 2, 2), stash, sgd, held, {1, 2}),
                  std::invalid_argument);

  // Measured (Note [tensor bytes]): a Linear(64 -> 32) on 16 rows holds at least its input and output while its
  // forward runs, and its dy and dx while its backward does; the ReLU after it as much again.
  sequential small = sequential::from_spec("64-32-8", sequential_options{"relu", 1});
  const auto costs = measure_layer_costs(small, test::random_tensor({16, 64}, 3), 1);
  CHECK(costs[0].workspace_bytes >= 16 * (64 + 32) * 4);
  CHECK(costs[2].workspace_bytes >= 16 * (32 + 8) * 4);
  CHECK(costs[0].workspace_bytes < 64 * 1024);  // and not the model's weights or anything the process held before
  const auto from_costs = predict_stage_memory(small, chunk_ranges_from_counts({3}, 3), make_schedule("gpipe", 1, 1),
                                               costs, sgd);
  CHECK(from_costs[0].workspace ==
        std::max({costs[0].workspace_bytes, costs[1].workspace_bytes, costs[2].workspace_bytes}));
}

TEST_CASE("a bfloat16 model's weight copies: every Linear's rounded weights, counted once, not in the workspace") {
  // 2 bytes a weight, 4 where bf16 products widen (Note [bf16 weights kept widened], Note [memory model]).
  sequential model = sequential::from_spec("64-32-8", sequential_options{"relu", 1});  // 64 x 32 and 32 x 8 weights
  const std::uint64_t per_weight = bf16_products_widen() ? 4 : 2;
  CHECK(model.at(0).derived_bytes() == 0);  // float32: none
  model.set_compute_dtype(dtype::bfloat16);
  CHECK(model.at(0).derived_bytes() == 64 * 32 * per_weight);
  CHECK(model.at(1).derived_bytes() == 0);  // ReLU
  optimizer_config sgd;
  sgd.kind = "sgd";
  const tensor sample = test::random_tensor({16, 64}, 3);
  const auto costs = measure_layer_costs(model, sample, 1);
  const auto predicted = predict_stage_memory(model, chunk_ranges_from_counts({3}, 3), make_schedule("gpipe", 1, 1),
                                              costs, sgd);
  CHECK(predicted[0].weight_copies == (64 * 32 + 32 * 8) * per_weight);
  CHECK(predicted[0].total() == predicted[0].parameters + predicted[0].gradients + predicted[0].stash +
                                    predicted[0].workspace + predicted[0].weight_copies);
  // The first forward makes the copy and keeps it: measured, it is what the copy holds; the workspace is without it.
  const std::uint64_t before = tensor_bytes_in_use();
  layer_cache cache;
  const tensor y = model.at(0).forward(sample, cache, forward_context{});
  (void)y;
  CHECK(tensor_bytes_in_use() - before >= 64 * 32 * per_weight);
  CHECK(costs[0].workspace_bytes < 64 * 32 * per_weight + 16 * (64 + 32) * 4);
  // A copy of the layer starts without one (it makes its own): the layer costs see each layer make it.
  const std::uint64_t with_copy = tensor_bytes_in_use();
  {
    const auto clone = model.at(0).clone();
    // Weights, bias and their gradients (with the blocks' margins), and no copy (at least 64 x 32 x 2 bytes).
    CHECK(tensor_bytes_in_use() - with_copy < 2 * (64 * 32 * 4 + 32 * 4) + 64 * 32 * 2);
  }
  CHECK(weight_copies_text(0).empty());
  CHECK(weight_copies_text(2048) == ", weight copies 2.0 KB");
}

TEST_CASE("across T tensor-parallel ranks a stage counts its weights once and its stash once per rank") {
  stage_memory m;
  m.parameters = m.gradients = 4 << 20;
  m.optimizer_state = 8 << 20;
  m.stash = 10 << 20;
  const auto two = across_tensor_parallel({m}, 2);
  CHECK(two[0].parameters == m.parameters);
  CHECK(two[0].optimizer_state == m.optimizer_state);
  CHECK(two[0].stash == 20u << 20);
  CHECK(across_tensor_parallel({m}, 1)[0].total() == m.total());
  m.workspace = 1 << 20;  // each rank runs its own action
  CHECK(across_tensor_parallel({m}, 2)[0].workspace == 2u << 20);
}

TEST_CASE("of all T tensor-parallel ranks: T times one rank's exact figures (Note [tensor-parallel memory])") {
  stage_memory m;
  m.parameters = m.gradients = 4 << 20;
  m.optimizer_state = 8 << 20;
  m.stash = 10 << 20;
  m.in_flight = 3;
  const auto two = of_all_ranks({m}, 2);
  CHECK(two[0].parameters == 8u << 20);
  CHECK(two[0].gradients == 8u << 20);
  CHECK(two[0].optimizer_state == 16u << 20);
  CHECK(two[0].stash == 20u << 20);
  CHECK(two[0].in_flight == 3);
  CHECK(of_all_ranks({m}, 1)[0].total() == m.total());
  m.workspace = 1 << 20;
  CHECK(of_all_ranks({m}, 2)[0].workspace == 2u << 20);
}

TEST_CASE("a tensor-parallel rank's model pairs Linear layers within each chunk only, and holds its shards") {
  const sequential whole = sequential::from_spec("784-256-128-10");  // linear, relu, linear, relu, linear
  // One chunk: the first two Linears pair (column, row); the last stays whole.
  sequential one = tensor_parallel_rank(whole, {5}, 0, 2);
  CHECK(one.layer_specs() == std::vector<std::string>{"column_linear:784:256", "relu", "row_linear:256:128", "relu",
                                                      "linear:128:10"});
  // Chunks of 2 and 3 layers (a pipeline's): the first Linear has no partner in its chunk and stays whole, as
  // the stages build them.
  sequential two = tensor_parallel_rank(whole, {2, 3}, 1, 2);
  CHECK(two.layer_specs() == std::vector<std::string>{"linear:784:256", "relu", "column_linear:256:128", "relu",
                                                      "row_linear:128:10"});
  std::size_t whole_count = 0, rank_count = 0;
  for (const parameter& p : const_cast<sequential&>(whole).parameters()) whole_count += p.value->size();
  for (const parameter& p : one.parameters()) rank_count += p.value->size();
  // Rank 0 of 2 holds half of each split Linear's weight (the column one's bias too, the row one's bias whole)
  // and the whole last Linear.
  CHECK(rank_count == 784 * 128 + 128 + 128 * 128 + 128 + 128 * 10 + 10);
  CHECK(whole_count == 784 * 256 + 256 + 256 * 128 + 128 + 128 * 10 + 10);
  CHECK_THROWS_WITH_AS(tensor_parallel_rank(whole, {2, 2}, 0, 2), "tensor_parallel_rank: chunks of 4 layers, the model has 5",
                       std::invalid_argument);
  // A forward on the rank's model runs alone (its group's collectives return at once): the shapes of one rank.
  sequential_cache cache;
  tensor x = tensor::from_shape({3, 784});
  x.fill(0.5f);
  const tensor y = one.forward(x, cache, forward_context{true, 0, 0});
  CHECK(y.shape() == shape_t{3, 10});
}

TEST_CASE("memory holders: this process holds every replica's stages, on nodes, replica d's stage s is on (d p + s) % n") {
  const auto here = memory_holders(2, 3, {});
  REQUIRE(here.size() == 1);
  CHECK(here[0].name == "this process");
  CHECK(here[0].stages == std::vector<int>{0, 1, 0, 1, 0, 1});
  const auto nodes = memory_holders(2, 2, {"a:1", "b:2", "c:3"});  // slots 0..3 on a, b, c, a
  REQUIRE(nodes.size() == 3);
  CHECK(nodes[0].name == "node a:1");
  CHECK(nodes[0].stages == std::vector<int>{0, 1});
  CHECK(nodes[1].stages == std::vector<int>{1});
  CHECK(nodes[2].stages == std::vector<int>{0});
  CHECK(memory_holders(1, 1, {"a:1", "b:2"}).size() == 1);  // a node that holds nothing is left out
}

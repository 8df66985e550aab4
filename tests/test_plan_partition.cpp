// Partitioning: the balanced split against hand-worked optima and brute force, the split by parameter count
// of a real model, the split by measured time putting a heavy layer alone, and whole blocks per chunk.
#include <doctest/doctest.h>

#include <algorithm>
#include <functional>
#include <map>
#include <numeric>
#include <random>

#include "plan/partition.hpp"
#include "tensor/compute.hpp"
#include "data/synthetic.hpp"

using namespace ap;

namespace {

using counts = std::vector<std::size_t>;

// The largest chunk sum of a split.
double bottleneck_of(const std::vector<double>& costs, const counts& split) {
  double worst = 0.0;
  std::size_t at = 0;
  for (std::size_t c : split) {
    worst = std::max(worst, std::accumulate(costs.begin() + at, costs.begin() + at + c, 0.0));
    at += c;
  }
  return worst;
}

// Every split of n layers into k non-empty chunks, the smallest bottleneck (brute force).
double brute_force_bottleneck(const std::vector<double>& costs, std::size_t k) {
  double best = 1e300;
  counts split;
  std::function<void(std::size_t)> go = [&](std::size_t left) {
    if (split.size() + 1 == k) {
      split.push_back(left);
      best = std::min(best, bottleneck_of(costs, split));
      split.pop_back();
      return;
    }
    for (std::size_t c = 1; c + (k - split.size() - 1) <= left; ++c) {
      split.push_back(c);
      go(left - c);
      split.pop_back();
    }
  };
  go(costs.size());
  return best;
}

void check_valid(const counts& split, std::size_t layers, int chunks) {
  REQUIRE(split.size() == static_cast<std::size_t>(chunks));
  for (std::size_t c : split) CHECK(c >= 1);
  CHECK(std::accumulate(split.begin(), split.end(), std::size_t{0}) == layers);
}

}  // namespace

TEST_CASE("the balanced split finds the hand-worked optimum") {
  CHECK(balanced_counts({1, 1, 1, 10, 1, 1}, 3) == counts{3, 1, 2});  // the heavy layer alone
  CHECK(balanced_counts({1, 2, 3, 4, 5, 6, 7, 8, 9}, 3) == counts{5, 2, 2});  // 15 | 13 | 17
  CHECK(balanced_counts({1, 1, 1, 1, 1, 1}, 3) == counts{2, 2, 2});
  CHECK(balanced_counts({10, 1, 1, 1, 1}, 2) == counts{1, 4});  // a heavy first layer
  CHECK(balanced_counts({1, 1, 1, 1, 10}, 2) == counts{4, 1});  // a heavy last layer
  CHECK(balanced_counts({3, 1, 4}, 3) == counts{1, 1, 1});
  CHECK(balanced_counts({7}, 1) == counts{1});
  CHECK(balanced_counts({2, 2, 2, 2, 2, 2}, 3) == counts{2, 2, 2});
  // Ties on the bottleneck (4): the other chunks are evened out, 3 | 3 | 4 rather than 4 | 2 | 4.
  CHECK(balanced_counts({1, 1, 1, 1, 1, 1, 4}, 3) == counts{3, 3, 1});
  CHECK(balanced_counts({1, 3, 2, 2, 4}, 3) == counts{2, 2, 1});  // 4 | 4 | 4
  // Zero-cost layers (ReLU by parameter count) are spread: counts as even as the costs allow.
  CHECK(balanced_counts({0, 0, 0, 0}, 2) == counts{2, 2});
  CHECK(balanced_counts({5, 0, 0, 0, 0, 5}, 2) == counts{3, 3});
}

TEST_CASE("the balanced split reaches the brute-force bottleneck on random costs") {
  std::mt19937 rng(42);
  std::uniform_real_distribution<double> cost(0.0, 10.0);
  for (int trial = 0; trial < 200; ++trial) {
    const std::size_t n = 1 + rng() % 9;
    const int k = 1 + static_cast<int>(rng() % n);
    std::vector<double> costs(n);
    for (auto& c : costs) c = trial % 4 == 0 ? std::floor(cost(rng)) : cost(rng);  // some with ties
    const counts split = balanced_counts(costs, k);
    INFO("trial " << trial << ": " << n << " layers into " << k << " chunks");
    check_valid(split, n, k);
    CHECK(bottleneck_of(costs, split) == doctest::Approx(brute_force_bottleneck(costs, static_cast<std::size_t>(k))));
  }
}

TEST_CASE("impossible splits are refused, naming the counts") {
  CHECK_THROWS_WITH_AS(balanced_counts({1, 2, 3}, 4), doctest::Contains("cannot split 3 layers into 4 chunks"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(balanced_counts({1, 2, 3}, 0), doctest::Contains("at least one chunk"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(balanced_counts({1, -2, 3}, 2), doctest::Contains("layer 1 has cost"), std::invalid_argument);
  CHECK_THROWS_AS(balanced_counts({1, std::nan(""), 3}, 2), std::invalid_argument);
  CHECK_THROWS_WITH_AS(uniform_counts(3, 4), doctest::Contains("cannot split 3 layers into 4 chunks"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(parse_partition_method("flops"), doctest::Contains("known: uniform, params, time"),
                       std::invalid_argument);
  for (auto m : {partition_method::uniform, partition_method::parameters, partition_method::time})
    CHECK(parse_partition_method(to_string(m)) == m);
}

TEST_CASE("the split by parameter count of 784-2048-2048-2048-10") {
  const sequential model = sequential::from_spec("784-2048-2048-2048-10");  // L r L r L r L: 7 layers
  const std::vector<double> params = parameters_per_layer(model);
  REQUIRE(params.size() == 7);
  const double first = 784.0 * 2048 + 2048, middle = 2048.0 * 2048 + 2048, last = 2048.0 * 10 + 10;
  CHECK(params == std::vector<double>{first, 0, middle, 0, middle, 0, last});
  CHECK(std::accumulate(params.begin(), params.end(), 0.0) == double(model.parameter_count()));

  // Two chunks: the first Linear goes with the second (5.8M | 4.2M), not alone (1.6M | 8.4M).
  const counts two = balanced_counts(params, 2);
  check_valid(two, 7, 2);
  CHECK((two == counts{3, 4} || two == counts{4, 3}));
  CHECK(bottleneck_of(params, two) == first + middle);
  // Four chunks: each big Linear in its own chunk, the bottleneck is one 2048x2048 Linear.
  const counts four = balanced_counts(params, 4);
  check_valid(four, 7, 4);
  CHECK(bottleneck_of(params, four) == middle);
  CHECK(uniform_counts(7, 4) == counts{2, 2, 2, 1});
  // partition_counts splits whole blocks (Note [whole blocks]): L r | L r | L r | L.
  CHECK(partition_counts(partition_method::uniform, model, {}, 3) == counts{4, 2, 1});
  CHECK(partition_counts(partition_method::parameters, model, {}, 4) == counts{2, 2, 2, 1});
  CHECK(partition_counts(partition_method::parameters, model, {}, 2) == counts{4, 3});
  CHECK_THROWS_WITH_AS(partition_counts(partition_method::time, model, {}, 2), doctest::Contains("0 layer costs"),
                       std::invalid_argument);
}

TEST_CASE("measured costs: one per layer, the first layer's input gradient free, the model untouched") {
  sequential model = sequential::from_spec("12-16-4");
  model.zero_grad();
  const tensor sample = make_blobs(8, 12, 4, 1).inputs;
  const auto costs = measure_layer_costs(model, sample, 3);
  REQUIRE(costs.size() == 3);
  CHECK(costs[0].backward_input_s == 0.0);
  for (const auto& c : costs) {
    CHECK(c.forward_s >= 0.0);
    CHECK(c.backward_weight_s >= 0.0);
    CHECK(c.total_s() == doctest::Approx(c.forward_s + c.backward_input_s + c.backward_weight_s));
  }
  for (auto& p : model.parameters())
    CHECK(std::all_of(p.grad->begin(), p.grad->end(), [](float g) { return g == 0.0f; }));
  CHECK_THROWS_AS(measure_layer_costs(model, sample, 0), std::invalid_argument);
}

TEST_CASE("the split by measured time puts a heavy Linear(2048->2048) alone") {
  // 2048 inputs, not 512: the Linear then costs over a hundred times a ReLU beside it, so ReLUs slowed by a
  // loaded machine or a sanitizer (two of them once outweighed a Linear(512->2048)) cannot change the split.
  sequential model;
  for (const char* spec : {"relu", "relu", "linear:2048:2048", "relu", "relu"}) model.add(make_layer(spec));
  model.initialize(3);
  const tensor sample = make_blobs(64, 2048, 4, 5).inputs;
  const auto costs = measure_layer_costs(model, sample, 5);
  for (std::size_t i : {0, 1, 3, 4}) {
    INFO("layer " << i << " costs " << costs[i].total_s() << " s, the Linear " << costs[2].total_s() << " s");
    CHECK(costs[i].total_s() < costs[2].total_s());
  }
  CHECK(balanced_counts(total_costs(costs), 3) == counts{2, 1, 2});
  CHECK(partition_counts(partition_method::time, model, costs, 3) == counts{2, 1, 2});
  CHECK(uniform_counts(5, 3) == counts{2, 2, 1});  // what uniform would do: the Linear shares a chunk
}

TEST_CASE("the split by measured time on sleep layers follows the sleeps") {
  // The heavy layer costs five light ones (100 vs 20 ms): {3, 1, 2} is the only split whose chunks all stay within
  // it (60, 100, 40 ms; the next best has 120), so the answer survives a loaded machine, where a sleeping thread
  // wakes milliseconds late, by a wide margin. The median of three repeats drops one late wake-up per layer.
  sequential model;
  for (const char* spec : {"sleep:10:10", "sleep:10:10", "sleep:10:10", "sleep:50:50", "sleep:10:10", "sleep:10:10"})
    model.add(make_layer(spec));
  const auto costs = measure_layer_costs(model, zeros({4, 3}), 3);
  CHECK(costs[3].forward_s >= 0.050);
  CHECK(costs[3].backward_input_s >= 0.025);
  CHECK(costs[0].backward_input_s == 0.0);  // never run by a pipeline
  CHECK(balanced_counts(total_costs(costs), 3) == counts{3, 1, 2});
}

TEST_CASE("predicted busy time sums each stage's chunks times the microbatches") {
  const std::vector<layer_cost> costs = {{1, 0, 1}, {2, 2, 2}, {1, 1, 1}, {3, 3, 0}};
  // Two stages, one chunk each: layers 0..1 and 2..3.
  CHECK(predicted_busy_s(costs, {{0, 2}, {2, 4}}, 2, 4) == std::vector<double>{4 * 8.0, 4 * 9.0});
  // Two stages x two chunks, round-robin: stage 0 holds chunks 0 and 2 (layers 0 and 2), stage 1 layers 1 and 3.
  CHECK(predicted_busy_s(costs, {{0, 1}, {1, 2}, {2, 3}, {3, 4}}, 2, 1) == std::vector<double>{2 + 3.0, 6 + 6.0});
  const op_costs sim = simulation_costs(costs, {{0, 2}, {2, 4}}, 2);
  CHECK(sim.forward == std::vector<double>{3, 4});
  CHECK(sim.backward_input == std::vector<double>{2, 4});
  CHECK(sim.backward_weight == std::vector<double>{3, 1});
  CHECK_THROWS_AS(predicted_busy_s(costs, {{0, 5}}, 1, 1), std::invalid_argument);
}

TEST_CASE("each layer's costs come from its stage's thread count (Note [costs at the stages' threads])") {
  // Costs measured on 1 and on 2 threads (forward only, to tell them apart).
  const std::map<int, std::vector<layer_cost>> by_threads{{1, {{10, 0, 0}, {11, 0, 0}, {12, 0, 0}, {13, 0, 0}}},
                                                          {2, {{20, 0, 0}, {21, 0, 0}, {22, 0, 0}, {23, 0, 0}}}};
  const auto forwards = [](const std::vector<layer_cost>& costs) {
    std::vector<double> f;
    for (const layer_cost& c : costs) f.push_back(c.forward_s);
    return f;
  };
  // Stage 0 on 2 threads (layers 0..1), stage 1 on 1 (layers 2..3).
  CHECK(forwards(costs_at_stage_threads(by_threads, {2, 1}, {{0, 2}, {2, 4}})) == std::vector<double>{20, 21, 12, 13});
  // Interleaved, 2 stages x 2 chunks: chunks 0 and 2 (layers 0 and 2) on stage 0, chunks 1 and 3 on stage 1.
  CHECK(forwards(costs_at_stage_threads(by_threads, {1, 2}, {{0, 1}, {1, 2}, {2, 3}, {3, 4}})) ==
        std::vector<double>{10, 21, 12, 23});
  // One stage on 2 threads: the predicted busy time is the 2-thread costs' (20 + 21 + 22 + 23) x 3 microbatches.
  CHECK(predicted_busy_s(costs_at_stage_threads(by_threads, {2}, {{0, 4}}), {{0, 4}}, 1, 3) == std::vector<double>{258});
  CHECK_THROWS_WITH_AS(costs_at_stage_threads(by_threads, {4, 1}, {{0, 2}, {2, 4}}),
                       doctest::Contains("stage 0 runs on 4 threads"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(costs_at_stage_threads(by_threads, {1}, {{0, 5}}), doctest::Contains("chunk 0 ends at layer 5"),
                       std::invalid_argument);
}

TEST_CASE("measured costs on 2 threads leave the caller's own thread setting as it was") {
  sequential model = sequential::from_spec("12-16-4");
  const tensor sample = make_blobs(8, 12, 4, 1).inputs;
  set_compute_threads(1);
  CHECK(measure_layer_costs(model, sample, 1, 2).size() == 3);
  CHECK(compute_threads() == 1);
  set_compute_threads(3);
  CHECK(measure_layer_costs(model, sample, 1, 1).size() == 3);
  CHECK(compute_threads() == 3);
  CHECK_THROWS_AS(measure_layer_costs(model, sample, 1, 0), std::invalid_argument);
  CHECK(compute_threads() == 3);
  set_compute_threads(1);
}

TEST_CASE("measured costs of a model of blocks, a block first (whose backward_weight needs its inner backward_input)") {
  sequential model = sequential::from_layer_specs(
      {"block[linear:12:16,gelu]", "residual[layernorm:16,linear:16:16,tanh]", "linear:16:4"});
  model.initialize(2);
  const tensor sample = make_blobs(8, 12, 4, 1).inputs;
  const auto costs = measure_layer_costs(model, sample, 2);
  REQUIRE(costs.size() == 3);
  CHECK(costs[0].backward_input_s == 0.0);
  CHECK(partition_counts(partition_method::parameters, model, costs, 2).size() == 2);
}

TEST_CASE("blocks: a layer with parameters and the activations after it, leading activations join the first") {
  CHECK(block_sizes(sequential::from_spec("784-512-256-10")) == counts{2, 2, 1});
  sequential model;
  for (const char* spec : {"relu", "linear:4:8", "relu", "dropout:0.1:7", "linear:8:3", "linear:3:3", "tanh"})
    model.add(make_layer(spec));
  CHECK(block_sizes(model) == counts{4, 1, 2});
  sequential activations;
  for (const char* spec : {"relu", "tanh"}) activations.add(make_layer(spec));
  CHECK(block_sizes(activations) == counts{2});
}

TEST_CASE("the partition cuts only between blocks: no chunk holds a lone activation when there are enough blocks") {
  // The demo's model on the demo's 4 stages, and the heavy model on 2..4: every method, every chunk count.
  for (const char* spec : {"784-512-256-128-10", "784-2048-2048-2048-10", "784-512-256-10"}) {
    const sequential model = sequential::from_spec(spec);
    std::vector<layer_cost> costs(model.size());
    const std::vector<double> params = parameters_per_layer(model);
    for (std::size_t i = 0; i < costs.size(); ++i) costs[i] = {params[i] * 1e-9, params[i] * 1e-9, params[i] * 1e-9};
    const std::size_t blocks = block_sizes(model).size();
    for (int chunks = 1; chunks <= static_cast<int>(blocks); ++chunks)
      for (auto method : {partition_method::uniform, partition_method::parameters, partition_method::time}) {
        CAPTURE(spec);
        CAPTURE(chunks);
        CAPTURE(to_string(method));
        const counts split = partition_counts(method, model, costs, chunks);
        check_valid(split, model.size(), chunks);
        const auto ranges = chunk_ranges_from_counts(split, model.size());
        CHECK(chunks_without_parameters(model, ranges).empty());
        for (const auto& r : ranges) CHECK(params[r.begin] > 0.0);  // every chunk starts with its block's Linear
      }
  }
  // 784-512-256-128-10 on 4 stages: one block each, whatever the method.
  const sequential demo = sequential::from_spec("784-512-256-128-10");
  CHECK(partition_counts(partition_method::uniform, demo, {}, 4) == counts{2, 2, 2, 1});
}

TEST_CASE("fewer blocks than chunks: the split falls back to layers and names the chunks without parameters") {
  // 784-512-256-10 has 3 blocks; 4 chunks cannot all hold one, so one chunk is a lone ReLU.
  const sequential model = sequential::from_spec("784-512-256-10");
  const counts split = partition_counts(partition_method::uniform, model, {}, 4);
  CHECK(split == counts{2, 1, 1, 1});
  CHECK(chunks_without_parameters(model, chunk_ranges_from_counts(split, model.size())) == counts{2});
}

// --auto's planner (Note [automatic configuration]): every configuration it returns fits the cores, the batch
// and the budget; it ranks them by the predicted step; with costs made up so that the answer is known (threads
// that scale perfectly, threads that do not scale, a budget only small stashes fit) it picks that answer; and
// after a run it names what was off.
#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <tuple>

#include "plan/auto_config.hpp"
#include "test_support.hpp"

using namespace ap;

namespace {

// Made-up costs: each layer takes `per_row` seconds per sample forward, twice that backward (split evenly
// between I and W), divided by the threads when `threads_scale`; the stash is `stash_per_row` bytes a sample,
// a tenth of it when recomputing; all-reduces cost `allreduce` seconds a megabyte.
struct made_up_machine {
  double per_row = 1e-3;
  bool threads_scale = true;
  std::uint64_t stash_per_row = 1000;
  double allreduce = 0.0;
  std::map<std::tuple<std::size_t, int, recompute_mode>, std::vector<layer_cost>> costs;
  std::set<std::pair<std::size_t, int>> asked;  // (rows, threads) the planner asked for

  auto_inputs inputs(sequential& model, std::size_t batch, int cores, std::uint64_t budget = 0) {
    auto_inputs in;
    in.batch = batch;
    in.cores = cores;
    in.budget = budget;
    in.optimizer.kind = "sgd";
    in.layer_costs = [this, n = model.size()](std::size_t rows, int threads,
                                                recompute_mode rc) -> const std::vector<layer_cost>& {
      asked.insert({rows, threads});
      auto& c = costs[{rows, threads, rc}];
      const double f = per_row * static_cast<double>(rows) / (threads_scale ? threads : 1);
      const std::uint64_t stash = stash_per_row * rows / (rc == recompute_mode::blocks ? 10 : 1);
      c.assign(n, layer_cost{f, f, f, stash, 4 * rows});
      return c;
    };
    in.allreduce_s = [this](int, std::uint64_t bytes) { return allreduce * static_cast<double>(bytes) / 1e6; };
    in.optimizer_s = [](int) { return 0.0; };
    in.hop_s = 1e-6;
    return in;
  }
};

// 7 layers, 4 blocks; Linear pairs (0, 2) and (4, 6) split over T.
sequential mlp() { return sequential::from_spec("32-64-64-64-10"); }

}  // namespace

TEST_CASE("every candidate fits the cores, divides the batch and says so in its description") {
  sequential model = mlp();
  made_up_machine machine;
  const auto ranked = rank_configurations(model, machine.inputs(model, 64, 4));
  REQUIRE(ranked.size() > 10);
  std::set<std::string> kinds;
  for (const auto_candidate& c : ranked) {
    const mesh_config& m = c.config;
    INFO(describe(m));
    CHECK(m.ranks() * m.threads <= 4);
    CHECK(64 % m.data_parallel == 0);
    CHECK(m.microbatches <= 64 / m.data_parallel);
    CHECK(c.step_s > 0.0);
    CHECK(c.peak_bytes > 0);
    if (m.stages > 0) {
      CHECK(m.microbatches >= m.stages);
      CHECK(m.layers_per_chunk.size() == static_cast<std::size_t>(m.stages * m.chunks));
      kinds.insert(m.schedule);
    } else {
      CHECK(m.microbatches == 1);
      CHECK(m.layers_per_chunk.empty());
    }
    CHECK(m.recompute == recompute_mode::none);  // no budget: recomputing only costs
  }
  CHECK(kinds == std::set<std::string>{"gpipe", "1f1b", "zb-h1", "interleaved"});
  for (std::size_t i = 1; i < ranked.size(); ++i) CHECK(ranked[i - 1].step_s <= ranked[i].step_s);
  // Data and tensor parallelism, pipelines of 2 to 4 stages, threads 1, 2 and 4 are all among them.
  std::set<int> D, T, P, t;
  for (const auto_candidate& c : ranked)
    D.insert(c.config.data_parallel), T.insert(c.config.tensor_parallel), P.insert(c.config.stages),
        t.insert(c.config.threads);
  CHECK(D == std::set<int>{1, 2, 4});
  CHECK(T == std::set<int>{1, 2, 4});
  CHECK(P == std::set<int>{0, 2, 3, 4});
  CHECK(t == std::set<int>{1, 2, 4});
}

TEST_CASE("descriptions name the mesh") {
  CHECK(describe(mesh_config{0, 1, "", 1, 1, 1, 4, recompute_mode::none, {}}) == "single process: 4 threads");
  CHECK(describe(mesh_config{0, 1, "", 1, 2, 2, 1, recompute_mode::none, {}}) ==
        "single process: 2 replicas x 1 thread, 2 tensor-parallel ranks");
  CHECK(describe(mesh_config{2, 8, "1f1b", 1, 1, 1, 2, recompute_mode::blocks, {3, 2}}) ==
        "pipeline: 2 stages x 2 threads, 1f1b, 8 microbatches, layers 3,2, recompute blocks");
  CHECK(describe(mesh_config{2, 4, "interleaved", 2, 2, 1, 1, recompute_mode::none, {1, 1, 1, 2}}) ==
        "pipeline: 2 stages x 1 thread, interleaved, 4 microbatches, 2 chunks per stage, layers 1,1,1,2, 2 replicas");
}

TEST_CASE("threads that scale perfectly and a pipeline's bubble: one rank on every core wins") {
  sequential model = mlp();
  made_up_machine machine;
  const auto ranked = rank_configurations(model, machine.inputs(model, 64, 4));
  const mesh_config& best = ranked.front().config;
  INFO(describe(best));
  // Single process, 4 threads: 7 layers x 3 ops x 64 rows x 1 ms / 4 = 336 ms; so are 4 replicas with free
  // all-reduces, which tie and lose on the rank count.
  CHECK(best.stages == 0);
  CHECK(best.ranks() == 1);
  CHECK(best.threads == 4);
  CHECK(ranked.front().step_s == doctest::Approx(0.336));
  // Only the microbatch sizes and thread counts of some candidate were measured.
  for (const auto& [rows, threads] : machine.asked) {
    CHECK(rows <= 64);
    CHECK((threads == 1 || threads == 2 || threads == 4));
  }
}

TEST_CASE("threads that do not scale and free all-reduces: replicas on every core win") {
  sequential model = mlp();
  made_up_machine machine;
  machine.threads_scale = false;
  const auto ranked = rank_configurations(model, machine.inputs(model, 64, 4));
  const mesh_config& best = ranked.front().config;
  INFO(describe(best));
  CHECK(best.ranks() == 4);
  CHECK(best.threads == 1);
  CHECK(best.data_parallel == 4);  // a pipeline pays its bubble; ReLUs are not split over T
  CHECK(ranked.front().step_s == doctest::Approx(0.336));
  // With all-reduces that cost, replicas lose to a pipeline of 4 stages.
  machine.allreduce = 10.0;  // 10 s a megabyte
  const auto costly = rank_configurations(model, machine.inputs(model, 64, 4));
  INFO(describe(costly.front().config));
  CHECK(costly.front().config.stages == 4);
  CHECK(costly.front().communication_s == 0.0);
}

TEST_CASE("tensor parallelism: split layers compute 1/T and pay their all-reduces") {
  sequential model = sequential::from_spec("32-64-64-10");  // Linear 0 column, 2 row, 4 whole (unpaired)
  made_up_machine machine;
  machine.threads_scale = false;
  machine.allreduce = 1.0;  // a second a megabyte
  const auto ranked = rank_configurations(model, machine.inputs(model, 64, 2));
  const auto single_T2 = std::find_if(ranked.begin(), ranked.end(), [](const auto_candidate& c) {
    return c.config.stages == 0 && c.config.tensor_parallel == 2;
  });
  REQUIRE(single_T2 != ranked.end());
  // Each op 64 ms; the split layers 0 and 2 halve theirs (the made-up costs give layer 0 an I too). One
  // all-reduce of 256 bytes: layer 2's output, forward; layer 0's backward one would reduce its dx, which
  // nobody computes.
  const double op = 0.064, split = 2 * (3 * op / 2), whole = 3 * 3 * op, reduce = 256e-6;
  CHECK(single_T2->step_s == doctest::Approx(split + whole + reduce));
  CHECK(single_T2->communication_s == doctest::Approx(reduce));
}

TEST_CASE("a budget: only what fits, recomputation where it buys room, and a refusal naming the smallest peak") {
  sequential model = sequential::from_spec("gpt:layers=4,dim=16,heads=2,context=8");
  made_up_machine machine;
  machine.stash_per_row = 1 << 20;  // a megabyte a sample per layer: the stash dominates
  const auto free = rank_configurations(model, machine.inputs(model, 16, 2));
  const std::uint64_t budget = free.front().peak_bytes / 3;
  const auto fitting = rank_configurations(model, machine.inputs(model, 16, 2, budget));
  REQUIRE(!fitting.empty());
  bool recomputes = false;
  for (const auto_candidate& c : fitting) {
    CHECK(c.peak_bytes <= budget);
    recomputes = recomputes || c.config.recompute == recompute_mode::blocks;
  }
  CHECK(recomputes);
  CHECK(fitting.front().step_s >= free.front().step_s);
  const std::string refused =
      test::error_of([&] { rank_configurations(model, machine.inputs(model, 16, 2, 1000)); });
  CHECK(test::contains(refused, "--auto: no configuration on 2 cores fits --max-memory"));
  CHECK(test::contains(refused, "the least memory this process is predicted to hold is"));
  CHECK(test::contains(refused, "recompute blocks"));
}

namespace {

// `nodes` as (host, cores, fixed threads), and a network whose messages cost
// `latency` seconds plus `per_byte` seconds a byte (Note [auto on nodes]).
auto_inputs on_nodes(auto_inputs in, std::vector<auto_node> nodes, double latency = 1e-4, double per_byte = 1e-9) {
  in.nodes = std::move(nodes);
  in.network_s = [=](std::uint64_t bytes) { return latency + per_byte * static_cast<double>(bytes); };
  return in;
}

// The candidate of P stages and D replicas of one thread each, no tensor parallelism, in `ranked`.
auto_candidate candidate(const std::vector<auto_candidate>& ranked, int P, int D) {
  const auto it = std::find_if(ranked.begin(), ranked.end(), [&](const auto_candidate& c) {
    return c.config.stages == P && c.config.data_parallel == D && c.config.tensor_parallel == 1 && c.config.threads == 1;
  });
  REQUIRE(it != ranked.end());
  return *it;
}

// Each machine's ranks x threads, the ranks placed as the pipeline places them (node_of).
std::map<std::string, int> cores_used(const mesh_config& m, const std::vector<auto_node>& nodes) {
  std::map<std::string, int> used;
  for (int d = 0; d < m.data_parallel; ++d)
    for (int s = 0; s < m.stages; ++s)
      used[nodes[static_cast<std::size_t>(d * m.stages + s) % nodes.size()].host] += m.tensor_parallel * m.threads;
  return used;
}

}  // namespace

TEST_CASE("on nodes: pipelines from one stage up, each machine's ranks within its cores, more threads than here") {
  sequential model = mlp();
  made_up_machine machine;
  const std::vector<auto_node> nodes{{"10.0.0.1", 4, 0}, {"10.0.0.2", 4, 0}};
  // This machine has 1 core; the nodes' machines have 4 each.
  const auto ranked = rank_configurations(model, on_nodes(machine.inputs(model, 64, 1), nodes));
  REQUIRE(!ranked.empty());
  std::set<int> P, t;
  for (const auto_candidate& c : ranked) {
    const mesh_config& m = c.config;
    INFO(describe(m));
    CHECK(m.stages >= 1);  // the coordinator computes no layer
    CHECK(m.nodes == std::min(2, m.stages * m.data_parallel));
    CHECK(test::contains(describe(m), ", on " + std::to_string(m.nodes) + " node"));
    for (const auto& [host, used] : cores_used(m, nodes)) CHECK(used <= 4);
    P.insert(m.stages), t.insert(m.threads);
  }
  CHECK(P.count(1) == 1);
  CHECK(t == std::set<int>{1, 2, 4});
  // Threads that scale and a cheap network: every core of both machines, each rank on all 4 cores of its
  // node (fewer ranks pay less bubble and fewer messages).
  const mesh_config& best = ranked.front().config;
  INFO(describe(best));
  CHECK(best.threads == 4);
  CHECK(best.ranks() * best.threads == 8);
}

TEST_CASE("on nodes: nodes of one machine share its cores, the network's costs count, fixed threads are kept") {
  sequential model = mlp();
  made_up_machine machine;
  machine.threads_scale = false;  // ranks win over threads
  SUBCASE("two nodes on one 2-core machine place 2 ranks of 1 thread at most") {
    const std::vector<auto_node> shared{{"127.0.0.1", 2, 0}, {"127.0.0.1", 2, 0}};
    const auto ranked = rank_configurations(model, on_nodes(machine.inputs(model, 64, 2), shared));
    for (const auto_candidate& c : ranked) CHECK(c.config.ranks() * c.config.threads <= 2);
    CHECK(ranked.front().config.ranks() == 2);
  }
  SUBCASE("a network that costs makes the replicas' ring and the stages' messages lose to one node") {
    const std::vector<auto_node> nodes{{"a", 2, 0}, {"b", 2, 0}};
    const auto cheap = rank_configurations(model, on_nodes(machine.inputs(model, 64, 1), nodes, 0.0, 0.0));
    INFO(describe(cheap.front().config));
    CHECK(cheap.front().config.nodes == 2);  // 4 ranks on both machines
    CHECK(cheap.front().config.ranks() == 4);
    const auto costly = rank_configurations(model, on_nodes(machine.inputs(model, 64, 1), nodes, 10.0, 0.0));
    INFO(describe(costly.front().config));
    CHECK(costly.front().config.nodes == 1);
    // Replicas across nodes, D = 2 on two nodes, one stage, with messages of 0.5 s.
    const auto two = std::find_if(cheap.begin(), cheap.end(), [](const auto_candidate& c) {
      return c.config.stages == 1 && c.config.data_parallel == 2 && c.config.tensor_parallel == 1;
    });
    REQUIRE(two != cheap.end());
    const auto paid = rank_configurations(model, on_nodes(machine.inputs(model, 64, 1), nodes, 0.5, 0.0));
    const auto same = std::find_if(paid.begin(), paid.end(), [&](const auto_candidate& c) {
      return describe(c.config) == describe(two->config);
    });
    REQUIRE(same != paid.end());
    // The ring's 2 (D - 1) messages and the coordinator's three: the first input, the step's start, the answers.
    CHECK(same->communication_s == doctest::Approx(two->communication_s + 2 * 0.5 + 3 * 0.5));
    // The last stage waits for each microbatch's loss gradient: its output out and the gradient back.
    CHECK(same->step_s - same->communication_s ==
          doctest::Approx(two->step_s - two->communication_s + 2 * 0.5 * same->config.microbatches));
  }
  SUBCASE("tensors of link_bytes or more between nodes cost link_s (activations, the ring), the coordinator's network_s") {
    const std::vector<auto_node> nodes{{"a", 2, 0}, {"b", 2, 0}};
    const auto with_links = [&](double network, double link, std::uint64_t link_bytes) {
      auto_inputs in = on_nodes(machine.inputs(model, 64, 1), nodes, network, 0.0);
      in.link_s = [=](std::uint64_t) { return link; };
      in.link_bytes = link_bytes;
      return rank_configurations(model, in);
    };
    const auto base = with_links(0.0, 0.0, 0);
    const auto links = with_links(0.5, 0.1, 0);  // every tensor between nodes on a link
    // D = 2 replicas of one stage on two nodes: the ring's 2 (D - 1) chunks on links, the coordinator's three
    // messages (the first input, the step's start, the answers) in CAF's.
    const auto_candidate ring0 = candidate(base, 1, 2), ring = candidate(links, 1, 2);
    CHECK(ring.communication_s == doctest::Approx(ring0.communication_s + 2 * 0.1 + 3 * 0.5));
    // Two stages on two nodes: each activation between them on a link.
    const auto_candidate pipe0 = candidate(base, 2, 1), pipe = candidate(links, 2, 1);
    CHECK(pipe.message_s == doctest::Approx(0.1));
    CHECK(pipe0.message_s == doctest::Approx(0.0));
    // Activations below link_bytes stay in CAF's messages.
    const auto small = with_links(0.5, 0.1, std::uint64_t{1} << 40);
    CHECK(candidate(small, 2, 1).message_s == doctest::Approx(0.5));
    CHECK(candidate(small, 1, 2).communication_s == doctest::Approx(ring.communication_s));  // the ring: links anyway
  }
  SUBCASE("between nodes of one host, tensors on links cost copy_s where it was timed (one copy), else link_s") {
    const auto ranked = [&](const std::vector<auto_node>& nodes, bool copies) {
      auto_inputs in = on_nodes(machine.inputs(model, 64, 1), nodes, 0.5, 0.0);
      in.link_s = [](std::uint64_t) { return 0.1; };
      if (copies) in.copy_s = [](std::uint64_t) { return 0.02; };
      return rank_configurations(model, in);
    };
    const std::vector<auto_node> one_host{{"h", 2, 0}, {"h", 2, 0}}, two_hosts{{"a", 2, 0}, {"b", 2, 0}};
    CHECK(candidate(ranked(one_host, true), 2, 1).message_s == doctest::Approx(0.02));
    CHECK(candidate(ranked(one_host, false), 2, 1).message_s == doctest::Approx(0.1));
    CHECK(candidate(ranked(two_hosts, true), 2, 1).message_s == doctest::Approx(0.1));
    // The ring of D = 2 replicas on the two nodes: its 2 (D - 1) chunks copied on one host, on links across two.
    CHECK(candidate(ranked(one_host, true), 1, 2).communication_s ==
          doctest::Approx(candidate(ranked(two_hosts, true), 1, 2).communication_s - 2 * (0.1 - 0.02)));
  }
  SUBCASE("nodes started with --threads fix every rank's threads; different ones are refused") {
    const auto fixed = rank_configurations(model, on_nodes(machine.inputs(model, 64, 1), {{"a", 4, 2}, {"b", 4, 2}}));
    for (const auto_candidate& c : fixed) CHECK(c.config.threads == 2);
    const std::string refused = test::error_of(
        [&] { rank_configurations(model, on_nodes(machine.inputs(model, 64, 1), {{"a", 4, 2}, {"b", 4, 1}})); });
    CHECK(test::contains(refused, "--auto: the nodes were started with different --threads (node 0 2 threads, node 1 1 thread)"));
  }
}

TEST_CASE("on nodes: memory is per node, the stages each holds") {
  sequential model = sequential::from_spec("gpt:layers=4,dim=16,heads=2,context=8");
  made_up_machine machine;
  machine.stash_per_row = 1 << 20;
  const std::vector<auto_node> nodes{{"a", 1, 0}, {"b", 1, 0}};
  const auto free = rank_configurations(model, on_nodes(machine.inputs(model, 16, 1), nodes));
  std::optional<auto_candidate> one_node;  // the least a node holding every layer needs
  for (const auto_candidate& c : free)
    if (c.config.nodes == 1 && (!one_node || c.peak_bytes < one_node->peak_bytes)) one_node = c;
  REQUIRE(one_node);
  // A budget just under it: only pipelines over both nodes fit, or recomputation.
  const std::uint64_t budget = one_node->peak_bytes - 1;
  const auto fitting = rank_configurations(model, on_nodes(machine.inputs(model, 16, 1, budget), nodes));
  REQUIRE(!fitting.empty());
  for (const auto_candidate& c : fitting) {
    INFO(describe(c.config));
    CHECK(c.peak_bytes <= budget);
    CHECK((c.config.nodes == 2 || c.config.recompute == recompute_mode::blocks));
  }
  const std::string refused =
      test::error_of([&] { rank_configurations(model, on_nodes(machine.inputs(model, 16, 1, 1000), nodes)); });
  CHECK(test::contains(refused, "--auto: no configuration on 2 nodes fits --max-memory"));
  CHECK(test::contains(refused, "per node"));
  CHECK(test::contains(refused, "the least memory a node is predicted to hold is"));
}

TEST_CASE("tensor-parallel sizes are those the widths and heads divide") {
  sequential mlp_model = sequential::from_spec("32-64-48-10");  // the pair 32-64-48 splits its 64 columns
  CHECK(tensor_parallel_sizes(mlp_model, 16) == std::vector<int>{2, 4, 8, 16});
  CHECK(tensor_parallel_sizes(mlp_model, 3) == std::vector<int>{2});
  sequential odd = sequential::from_spec("32-6-10");  // 6 columns: 2 only
  CHECK(tensor_parallel_sizes(odd, 8) == std::vector<int>{2});
  sequential gpt = sequential::from_spec("gpt:layers=2,dim=16,heads=2,context=8");  // 2 heads
  CHECK(tensor_parallel_sizes(gpt, 8) == std::vector<int>{2});
  sequential unsplit = sequential::from_spec("32-10");
  CHECK(tensor_parallel_sizes(unsplit, 8).empty());
}

TEST_CASE("a local all-reduce is measured in seconds, more for more bytes") {
  CHECK(measure_local_allreduce_s(1, 1 << 20) == 0.0);
  const double small = measure_local_allreduce_s(2, 4 << 10, 3);
  const double large = measure_local_allreduce_s(2, 16 << 20, 3);
  CHECK(small > 0.0);
  CHECK(large > small);
}

TEST_CASE("after a run: silent within 15%, else the stage, the waits or the compute that was off") {
  auto_candidate pipe;
  pipe.config = mesh_config{2, 4, "1f1b", 1, 1, 1, 1, recompute_mode::none, {2, 2}};
  pipe.step_s = 0.100;
  pipe.busy_s = {0.080, 0.080};
  CHECK(predicted_step_check(pipe, 0.110, {0.081, 0.079}).empty());
  const std::string stage = predicted_step_check(pipe, 0.150, {0.080, 0.120});
  CHECK(test::contains(stage, "measured 150.00 ms per step against the predicted 100.00 ms (+50%)"));
  CHECK(test::contains(stage, "stage 1 computed 120.00 ms per step, predicted 80.00"));
  pipe.message_s = 250e-6;  // e.g. between nodes (Note [auto on nodes])
  const std::string waits = predicted_step_check(pipe, 0.150, {0.085, 0.082});
  CHECK(test::contains(waits, "the waits were off"));
  CHECK(test::contains(waits, "the messages between stages (estimated at 250 us each)"));
  auto_candidate single;
  single.config = mesh_config{0, 1, "", 1, 2, 1, 1, recompute_mode::none, {}};
  single.step_s = 0.100, single.compute_s = 0.060, single.communication_s = 0.040;
  CHECK(test::contains(predicted_step_check(single, 0.050, {}), "the all-reduces (40.00 ms"));
  single.compute_s = 0.100, single.communication_s = 0.0;
  CHECK(test::contains(predicted_step_check(single, 0.130, {}), "the compute (100.00 ms)"));
}

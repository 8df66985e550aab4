// Where compute ranks run (plan/cores.hpp, pure), and that several ranks of one process each computing on a team of
// intra-op threads of its own give the bits of one rank alone, pinned to their cores (Note [cores per rank]).
#include <doctest/doctest.h>

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <mutex>
#include <stdexcept>
#include <vector>
#include <thread>

#include "plan/cores.hpp"
#include "stage/lockstep_threads.hpp"
#include "tensor/compute.hpp"
#include "tensor/elementwise.hpp"
#include "pipeline_test_models.hpp"
#include "test_support.hpp"

using namespace ap;
using namespace ap::test;

TEST_CASE("assign_cores divides the cores evenly, pins where ranks fit, and leaves oversubscribed ranks unpinned") {
  std::vector<int> sixteen;
  for (int c = 0; c < 16; ++c) sixteen.push_back(c);
  const auto four = assign_cores(sixteen, 4, 0);
  REQUIRE(four.size() == 4);
  CHECK(four[0].threads == 4);
  CHECK(four[0].cores == std::vector<int>{0, 1, 2, 3});
  CHECK(four[3].cores == std::vector<int>{12, 13, 14, 15});
  CHECK(assign_cores(sixteen, 3, 0)[2].cores == std::vector<int>{10, 11, 12, 13, 14});  // 5 each, core 15 spare
  CHECK(assign_cores(sixteen, 8, 2)[7].cores == std::vector<int>{14, 15});
  const auto over = assign_cores({0, 1}, 4, 0);  // more ranks than cores: one thread each, the system spreads them
  CHECK(over[3].threads == 1);
  CHECK(over[3].cores.empty());
  CHECK(assign_cores(sixteen, 4, 8)[0].cores.empty());  // 4 x 8 > 16: not pinned, 8 threads as asked
  CHECK(assign_cores(sixteen, 4, 8)[0].threads == 8);
  CHECK(assign_cores({1, 3, 5, 7}, 2, 0)[1].cores == std::vector<int>{5, 7});  // the process's own cores (taskset)
  CHECK_THROWS_WITH_AS(assign_cores(sixteen, 2, -1), "--threads must be 0 (automatic) or more, got -1",
                       std::invalid_argument);
}

TEST_CASE("threads_by_cost shares the cores by stage cost, at least one each (Note [cores by stage cost])") {
  // The heavy MLP's four stages by weights (1.6 M, 4.2 M, 4.2 M, 20 k) on 16 cores: the slowest stage's share
  // of time falls from 4.2 / 4 to 4.2 / 6.
  CHECK(threads_by_cost({1.6, 4.2, 4.2, 0.02}, 16) == std::vector<int>{3, 6, 6, 1});
  CHECK(threads_by_cost({1.0, 1.0, 1.0, 1.0}, 16) == std::vector<int>{4, 4, 4, 4});
  CHECK(threads_by_cost({1.0, 1.0, 1.0}, 16) == std::vector<int>{6, 5, 5});  // ties: the earlier stage
  CHECK(threads_by_cost({0.0, 0.0}, 5) == std::vector<int>{3, 2});          // no cost known: even
  CHECK(threads_by_cost({5.0, 1.0}, 2) == std::vector<int>{1, 1});          // no spare core
  CHECK(threads_by_cost({5.0, 1.0, 1.0}, 2) == std::vector<int>{1, 1, 1});  // fewer cores than stages
  CHECK(threads_by_cost({9.0, 0.0}, 8) == std::vector<int>{7, 1});
  for (int cores = 3; cores <= 64; ++cores) {  // every core given, none twice
    const std::vector<int> t = threads_by_cost({0.3, 2.0, 0.7}, cores);
    CHECK(t[0] + t[1] + t[2] == cores);
    CHECK(*std::min_element(t.begin(), t.end()) >= 1);
  }
  CHECK_THROWS_AS(threads_by_cost({}, 4), std::invalid_argument);
  CHECK_THROWS_AS(threads_by_cost({1.0, -1.0}, 4), std::invalid_argument);
  // Uneven ranks: consecutive runs of cores when they fit, none pinned when they do not.
  const std::vector<compute_cores> placed = assign_cores({0, 1, 2, 3, 4, 5}, std::vector<int>{1, 3, 2});
  REQUIRE(placed.size() == 3);
  CHECK(placed[0].cores == std::vector<int>{0});
  CHECK(placed[1].cores == std::vector<int>{1, 2, 3});
  CHECK(placed[2].cores == std::vector<int>{4, 5});
  CHECK(placed[1].threads == 3);
  const std::vector<compute_cores> over = assign_cores({0, 1}, std::vector<int>{1, 2});
  CHECK((over[0].cores.empty() && over[1].cores.empty() && over[1].threads == 2));
}

TEST_CASE("the layout train prints names every rank and its cores") {
  std::vector<int> eight{0, 1, 2, 3, 4, 5, 6, 7};
  CHECK(cores_layout_text(rank_names(1, 2, 1), assign_cores(eight, 2, 0), 8) == "stage 0: cores 0-3, stage 1: cores 4-7");
  CHECK(cores_layout_text(rank_names(2, 1, 2), assign_cores(eight, 4, 1), 8) ==
        "replica 0 stage 0 rank 0: core 0, replica 0 stage 0 rank 1: core 1, replica 1 stage 0 rank 0: core 2, "
        "replica 1 stage 0 rank 1: core 3");
  CHECK(cores_layout_text(rank_names(2, 0, 1), assign_cores({0, 2, 4, 6}, 2, 0), 4) ==
        "replica 0: cores 0,2, replica 1: cores 4,6");
  CHECK(cores_layout_text(rank_names(1, 4, 1), assign_cores({0, 1}, 4, 0), 2) ==
        "4 compute ranks x 1 thread on 2 cores, not pinned (more ranks x threads than cores)");
  CHECK(rank_names(1, 0, 1) == std::vector<std::string>{"rank 0"});
}

TEST_CASE("nodes of one machine share its cores: each stage's slot counts every rank on its machine (Note [cores on nodes])") {
  // Two nodes on one host, 2 stages x T = 2: the machine hosts 4 ranks, stage 1's start after stage 0's.
  const auto one_host = node_slots(1, 2, 2, {"10.0.0.1", "10.0.0.1"});
  REQUIRE(one_host.size() == 2);
  CHECK((one_host[0].first_rank == 0 && one_host[0].node_ranks == 4));
  CHECK((one_host[1].first_rank == 2 && one_host[1].node_ranks == 4));
  // Two machines: each node's stage alone on its own.
  const auto two_hosts = node_slots(1, 2, 2, {"10.0.0.1", "10.0.0.2"});
  CHECK((two_hosts[0].first_rank == 0 && two_hosts[0].node_ranks == 2));
  CHECK((two_hosts[1].first_rank == 0 && two_hosts[1].node_ranks == 2));
  // D = 2 x P = 2 on nodes a, b (host x) and c (host y): replica d's stage s on node (2 d + s) % 3, so x hosts
  // stages at 0 (a), 1 (b) and 3 (a), y the one at 2 (c).
  const auto mixed = node_slots(2, 2, 1, {"x", "x", "y"});
  REQUIRE(mixed.size() == 4);
  CHECK((mixed[0].first_rank == 0 && mixed[1].first_rank == 1 && mixed[3].first_rank == 2));
  CHECK((mixed[0].node_ranks == 3 && mixed[1].node_ranks == 3 && mixed[3].node_ranks == 3));
  CHECK((mixed[2].first_rank == 0 && mixed[2].node_ranks == 1));
  // Each node then pins its share of the machine's cores: disjoint.
  const std::vector<int> eight{0, 1, 2, 3, 4, 5, 6, 7};
  const auto all = assign_cores(eight, one_host[0].node_ranks, 0);
  CHECK(all[static_cast<std::size_t>(one_host[0].first_rank)].cores == std::vector<int>{0, 1});
  CHECK(all[static_cast<std::size_t>(one_host[1].first_rank)].cores == std::vector<int>{4, 5});
}

namespace {

// One training pass (forward, backward) of a model wide enough for oneDNN to split its GEMMs over threads:
// the parameters' gradients, flattened.
std::vector<float> one_pass() {
  sequential m = sequential::from_layer_specs({"linear:64:256", "gelu", "linear:256:256", "relu", "linear:256:8"});
  m.initialize(3);
  const tensor x = random_tensor({128, 64}, 5);
  sequential_cache cache;
  const tensor y = m.forward(x, cache, forward_context{true, 0, 0});
  m.zero_grad();
  m.backward(y, cache);
  std::vector<float> out;
  for (const parameter& p : m.parameters()) out.insert(out.end(), p.grad->begin(), p.grad->end());
  return out;
}

}  // namespace

TEST_CASE("two ranks of one process, 2 intra-op threads each, give the bits of one such rank run alone") {
  use_compute_cores(compute_cores{2, {}});
  const std::vector<float> alone = one_pass();
  set_compute_threads(1);
  lockstep_threads ranks(2, {compute_cores{2, {}}, compute_cores{2, {}}});
  std::vector<std::vector<float>> got(2);
  std::vector<int> threads(2);
  for (int round = 0; round < 3; ++round) {
    const auto errors = ranks.run([&](int r) {
      threads[static_cast<std::size_t>(r)] = compute_threads();
      got[static_cast<std::size_t>(r)] = one_pass();
    });
    for (const auto& e : errors) CHECK(!e);
    CHECK(threads == std::vector<int>{2, 2});
    CHECK(got[0] == alone);
    CHECK(got[1] == alone);
  }
  set_compute_threads(1);
}

TEST_CASE("pinned ranks run on their own cores only") {
  const std::vector<int> cores = process_cores();
  if (cores.size() < 2) return;  // nothing to pin apart on one core
  const auto placement = assign_cores(cores, 2, 1);
  REQUIRE(!placement[1].cores.empty());
  std::vector<std::vector<int>> seen(2);
  {
    lockstep_threads ranks(2, placement);
    std::thread owner([&] {  // rank 0 runs on the caller: a thread of its own, so the test's stays unpinned
      ranks.run([&](int r) {
        cpu_set_t mask;
        CPU_ZERO(&mask);
        sched_getaffinity(0, sizeof mask, &mask);
        for (int c = 0; c < CPU_SETSIZE; ++c)
          if (CPU_ISSET(c, &mask)) seen[static_cast<std::size_t>(r)].push_back(c);
      });
    });
    owner.join();
  }
  CHECK(seen[0] == placement[0].cores);
  CHECK(seen[1] == placement[1].cores);
}

namespace {

std::size_t process_thread_count() {
  std::size_t n = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/task")) n += entry.is_directory() ? 1 : 0;
  return n;
}

}  // namespace

TEST_CASE("a thread that lowers its compute threads lets its idle team go (Note [idle teams])") {
  std::vector<float> y(std::size_t(parallel_elements) * 4, 1.0f), x(y.size(), 2.0f);
  const std::size_t before = process_thread_count();
  std::size_t with_team = 0, after = 0;
  std::thread rank([&] {  // a thread of its own: the test's thread keeps whatever team it has
    set_compute_threads(3);
    add_into(y.data(), x.data(), y.size());  // a parallel region: this thread and a team of 2 more
    with_team = process_thread_count();
    set_compute_threads(1);
    // The team's threads end after the release returns: wait for them, a bounded while.
    for (int i = 0; i < 200 && (after = process_thread_count()) > before + 1; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
  });
  rank.join();
  CHECK(y[0] == 3.0f);
  CHECK(with_team == before + 3);
  CHECK(after <= before + 1);  // this thread alone: an idle team would make libgomp's other teams sleep at every region
}

// Groups whose ranks share processes (collective/hierarchical_group.hpp, Note [hierarchical collectives]):
// the ranks of a "process" (a process key here; node processes in test_network_data_parallel) sum through
// shared memory, their leaders over gloo on loopback. Ranks run as threads.
#include <doctest/doctest.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <thread>

#include "collective/colocation.hpp"
#include "collective/gloo_group.hpp"
#include "collective/hierarchical_group.hpp"
#include "collective/shard.hpp"
#include "collective_ranks.hpp"
#include "test_support.hpp"

using namespace ap;
using namespace std::chrono_literals;

namespace {

using test::filled;
using test::on_every_rank;

bool same_place(const colocated_rank& a, const colocated_rank& b) {
  return a.local_rank == b.local_rank && a.local_size == b.local_size && a.process == b.process &&
         a.processes == b.processes;
}

// One rank per entry of `processes` (its process's name), connected: a hierarchical_group per rank, the
// leaders' groups across processes on gloo.
std::vector<std::unique_ptr<hierarchical_group>> connected(const std::string& name, const std::vector<std::string>& processes,
                                                           std::chrono::milliseconds timeout = test::scaled(20s)) {
  const std::vector<colocated_rank> places = colocate(processes);
  const int size = static_cast<int>(processes.size());
  std::vector<std::unique_ptr<hierarchical_group>> ranks;
  std::vector<std::string> endpoints;
  for (int r = 0; r < size; ++r) {
    const colocated_rank& p = places[static_cast<std::size_t>(r)];
    std::unique_ptr<network_group> inner;
    if (p.local_rank == 0 && p.processes > 1)
      inner = std::make_unique<gloo_group>(name, p.process, p.processes, "127.0.0.1", timeout);
    ranks.push_back(std::make_unique<hierarchical_group>(name, r, size, p, "test " + processes[static_cast<std::size_t>(r)],
                                                         std::move(inner), timeout));
    endpoints.push_back(ranks.back()->endpoint());
  }
  std::vector<std::thread> threads;
  for (auto& g : ranks) threads.emplace_back([&g, &endpoints] { g->connect(endpoints); });
  for (auto& t : threads) t.join();
  return ranks;
}

bool same_bits(const tensor& a, const tensor& b) {
  return a.shape() == b.shape() && std::memcmp(a.data(), b.data(), a.byte_size()) == 0;
}

}  // namespace

TEST_CASE("colocate: local ranks in rank order, processes ordered by their lowest rank") {
  const std::vector<colocated_rank> two = colocate({"b:1", "a:1", "b:1", "a:1", "b:1"});
  const std::vector<colocated_rank> expected{{0, 3, 0, 2}, {0, 2, 1, 2}, {1, 3, 0, 2}, {1, 2, 1, 2}, {2, 3, 0, 2}};
  REQUIRE(two.size() == expected.size());
  for (std::size_t r = 0; r < two.size(); ++r) {
    CAPTURE(r);
    CHECK(same_place(two[r], expected[r]));
  }
  const std::vector<colocated_rank> apart = colocate({"x", "y", "z"});
  for (int r = 0; r < 3; ++r) CHECK(same_place(apart[static_cast<std::size_t>(r)], colocated_rank{0, 1, r, 3}));
  CHECK(colocate({}).empty());
}

TEST_CASE("hierarchical collectives, 5 ranks in 2 processes and 3 in 1: exact sums and the same bits on every rank") {
  // Replicas 0, 2, 4 in one node process and 1, 3 in another (Note [data-parallel nodes]); then all in one.
  for (const std::vector<std::string>& processes :
       {std::vector<std::string>{"A", "B", "A", "B", "A"}, std::vector<std::string>{"C", "C", "C"}}) {
    const int size = static_cast<int>(processes.size());
    CAPTURE(size);
    auto ranks = connected("dp", processes);
    std::vector<tensor> sums(size), means(size), large(size), gathered(size), broadcast(size), shards(size);
    on_every_rank(size, [&](int r) {
      auto& g = *ranks[static_cast<std::size_t>(r)];
      const auto i = static_cast<std::size_t>(r);
      sums[i] = filled({5, 3}, r);
      means[i] = filled({4}, r);
      large[i] = filled({std::size_t{3} << 20}, r);
      collective_handle a = g.all_reduce(sums[i]);  // several in flight, in order
      collective_handle b = g.all_reduce(means[i], reduce_op::mean);
      collective_handle c = g.all_reduce(large[i]);
      a.wait(), b.wait(), c.wait();
      g.all_gather(filled({i + 1, 2}, r), gathered[i]).wait();
      broadcast[i] = filled({6}, r);
      g.broadcast(broadcast[i], size - 1).wait();  // from a rank that leads no process
      g.reduce_scatter(filled({7, 2}, r), shards[i]).wait();
    });
    for (std::size_t k = 0; k < 15; ++k) {
      float sum = 0;
      for (int r = 0; r < size; ++r) sum += filled({5, 3}, r).data()[k];
      CHECK(sums[0].data()[k] == sum);  // small whole numbers: exact in any order
    }
    std::size_t wrong = 0;
    for (std::size_t k = 0; k < large[0].size(); ++k) {
      float sum = 0;
      for (int r = 0; r < size; ++r) sum += static_cast<float>((k * 7 + static_cast<std::size_t>(r) * 3) % 11);
      wrong += large[0].data()[k] != sum;
    }
    CHECK(wrong == 0);
    for (std::size_t k = 0; k < 4; ++k) {
      float sum = 0;
      for (int r = 0; r < size; ++r) sum += filled({4}, r).data()[k];
      CHECK(means[0].data()[k] == doctest::Approx(sum / static_cast<float>(size)));
    }
    for (int r = 0; r < size; ++r) {
      const auto i = static_cast<std::size_t>(r);
      CHECK(same_bits(sums[i], sums[0]));
      CHECK(same_bits(means[i], means[0]));
      CHECK(same_bits(large[i], large[0]));
      CHECK(same_bits(broadcast[i], filled({6}, size - 1)));
      const tensor& got = gathered[i];
      REQUIRE(got.shape() == shape_t{static_cast<std::size_t>(size * (size + 1) / 2), 2});
      std::size_t offset = 0;
      for (int owner = 0; owner < size; ++owner) {
        const tensor piece = filled({static_cast<std::size_t>(owner + 1), 2}, owner);
        CHECK(std::memcmp(got.data() + offset, piece.data(), piece.byte_size()) == 0);
        offset += piece.size();
      }
      const auto [first, last] = shard_rows(7, static_cast<std::size_t>(size), i);
      REQUIRE(shards[i].shape() == shape_t{last - first, 2});
      for (std::size_t k = 0; k < shards[i].size(); ++k) {
        float sum = 0;
        for (int q = 0; q < size; ++q) sum += filled({7, 2}, q).data()[first * 2 + k];
        CHECK(shards[i].data()[k] == sum);
      }
    }
  }
}

TEST_CASE("hierarchical all-gather refuses ranks whose rows differ in width, naming the rank") {
  auto ranks = connected("tp", {"A", "B", "A"});
  std::vector<std::string> errors(3);
  on_every_rank(3, [&](int r) {
    const tensor mine = filled({2, static_cast<std::size_t>(r == 2 ? 3 : 2)}, r);
    tensor out;
    try {
      ranks[static_cast<std::size_t>(r)]->all_gather(mine, out).wait();
    } catch (const collective_error& e) {
      errors[static_cast<std::size_t>(r)] = e.what();
    }
  });
  INFO(errors[0]);
  CHECK(test::contains(errors[0], "group 'tp' all_gather: rank 2 has rows of 3 floats, rank 0 of 2"));
}

TEST_CASE("hierarchical abort: a non-leader's abort fails every rank's waiting all-reduce at once, in both processes") {
  auto ranks = connected("dp", {"A", "B", "A", "B"}, test::scaled(30s));
  std::vector<std::string> errors(4);
  std::vector<double> took(4);
  on_every_rank(4, [&](int r) {
    auto& g = *ranks[static_cast<std::size_t>(r)];
    const auto start = std::chrono::steady_clock::now();
    if (r == 3) {
      std::this_thread::sleep_for(300ms);  // the others are waiting on it by now
      g.abort("its backward failed");
    }
    tensor t = filled({1000}, r);
    try {
      g.all_reduce(t).wait();
    } catch (const collective_error& e) {
      errors[static_cast<std::size_t>(r)] = e.what();
    }
    took[static_cast<std::size_t>(r)] = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  });
  for (int r = 0; r < 4; ++r) {
    CAPTURE(r);
    INFO(errors[static_cast<std::size_t>(r)]);
    CHECK(test::contains(errors[static_cast<std::size_t>(r)], "group 'dp'"));
    CHECK(took[static_cast<std::size_t>(r)] < test::scaled(5.0));  // not the 30 s timeout
  }
  CHECK(test::contains(errors[3], "rank 3 aborted the group: its backward failed"));
}

TEST_CASE("hierarchical group: a place that does not fit, and a leader without its group across processes, are refused") {
  CHECK_THROWS_WITH_AS(hierarchical_group("dp", 0, 2, colocated_rank{0, 3, 0, 1}, "k", nullptr, 1s),
                       doctest::Contains("local rank 0 of 3 in process 0 of 1 does not fit a group of 2"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(hierarchical_group("dp", 0, 4, colocated_rank{0, 2, 0, 2}, "k", nullptr, 1s),
                       doctest::Contains("a process's leader needs the group across processes"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(hierarchical_group("dp", 1, 4, colocated_rank{1, 2, 0, 2}, "k",
                                          std::make_unique<gloo_group>("dp", 0, 2, "127.0.0.1", 1s), 1s),
                       doctest::Contains("only a process's leader takes part"), std::invalid_argument);
  auto lone = connected("dp", {"A", "A"});
  CHECK_THROWS_WITH_AS(lone[0]->connect({"member", "host:1"}), doctest::Contains("rank 1's endpoint 'host:1'"),
                       collective_error);
}

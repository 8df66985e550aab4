// Collectives among threads of one process (collective/local_group.hpp): results against a serial
// computation, identical bits on every rank, asynchrony, and every way a collective fails.
#include <doctest/doctest.h>

#include <atomic>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "collective/local_group.hpp"
#include "collective/lone_rank_group.hpp"
#include "collective/shard.hpp"
#include "collective_ranks.hpp"

using namespace ap;
using ap::test::on_every_rank;
using namespace std::chrono_literals;

namespace {

// Rank r's input: (rows, 3) with values that differ by rank, row and column (and are not exactly
// representable sums, so the summation order shows in the bits).
tensor input(int rank, std::size_t rows) {
  tensor t = tensor::from_shape({rows, 3});
  for (std::size_t i = 0; i < t.size(); ++i) t.data()[i] = 0.1f * static_cast<float>(rank + 1) + 0.37f * i;
  return t;
}


std::vector<float> values(const tensor& t) { return std::vector<float>(t.begin(), t.end()); }

}  // namespace

TEST_CASE("shard_rows splits rows as evenly as possible, the first ranks holding one more") {
  CHECK(shard_rows(10, 4, 0) == std::pair<std::size_t, std::size_t>{0, 3});
  CHECK(shard_rows(10, 4, 1) == std::pair<std::size_t, std::size_t>{3, 6});
  CHECK(shard_rows(10, 4, 2) == std::pair<std::size_t, std::size_t>{6, 8});
  CHECK(shard_rows(10, 4, 3) == std::pair<std::size_t, std::size_t>{8, 10});
  CHECK(shard_rows(2, 3, 2) == std::pair<std::size_t, std::size_t>{2, 2});
  CHECK_THROWS_AS(shard_rows(4, 2, 2), std::invalid_argument);
  CHECK_THROWS_AS(shard_rows(4, 0, 0), std::invalid_argument);
}

TEST_CASE("all_reduce sums (and averages) over the ranks in rank order, the same bits on every rank") {
  for (int size : {1, 2, 3, 4}) {
    // Larger than one accumulator chunk (16384 floats), so the chunking is exercised.
    const std::size_t rows = 7000;
    std::vector<float> sum = values(input(0, rows)), mean;
    for (int r = 1; r < size; ++r) {
      const auto x = values(input(r, rows));
      for (std::size_t i = 0; i < sum.size(); ++i) sum[i] += x[i];
    }
    for (float s : sum) mean.push_back(s / static_cast<float>(size));
    local_group g("dp", size);
    std::vector<std::vector<float>> got_sum(size), got_mean(size);
    on_every_rank(g, [&](process_group& m) {
      tensor a = input(m.rank(), rows), b = input(m.rank(), rows);
      auto ha = m.all_reduce(a), hb = m.all_reduce(b, reduce_op::mean);
      ha.wait();
      hb.wait();
      got_sum[m.rank()] = values(a);
      got_mean[m.rank()] = values(b);
    });
    for (int r = 0; r < size; ++r) {
      CHECK(got_sum[r] == sum);  // bitwise: the serial sum in rank order
      CHECK(got_mean[r] == mean);
    }
  }
}

TEST_CASE("reduce_scatter gives each rank its shard of the reduced rows, all_gather stacks shards in rank order") {
  const int size = 3;
  const std::size_t rows = 7;  // shards of 3, 2, 2 rows
  std::vector<float> sum = values(input(0, rows));
  for (int r = 1; r < size; ++r) {
    const auto x = values(input(r, rows));
    for (std::size_t i = 0; i < sum.size(); ++i) sum[i] += x[i];
  }
  local_group g("tp", size);
  std::vector<std::vector<float>> shards(size), gathered(size);
  std::vector<shape_t> shard_shapes(size), gathered_shapes(size);
  on_every_rank(g, [&](process_group& m) {
    const tensor in = input(m.rank(), rows);
    tensor shard, all;
    m.reduce_scatter(in, shard).wait();
    shard_shapes[m.rank()] = shard.shape();
    shards[m.rank()] = values(shard);
    m.all_gather(shard, all).wait();  // reduce_scatter then all_gather == all_reduce
    gathered_shapes[m.rank()] = all.shape();
    gathered[m.rank()] = values(all);
  });
  for (int r = 0; r < size; ++r) {
    const auto [first, last] = shard_rows(rows, size, r);
    CHECK(shard_shapes[r] == shape_t{last - first, 3});
    CHECK(shards[r] == std::vector<float>(sum.begin() + first * 3, sum.begin() + last * 3));
    CHECK(gathered_shapes[r] == shape_t{rows, 3});
    CHECK(gathered[r] == sum);
  }
}

TEST_CASE("broadcast copies the root's tensor to every rank") {
  local_group g("pp", 3);
  std::vector<std::vector<float>> got(3);
  on_every_rank(g, [&](process_group& m) {
    tensor t = input(m.rank(), 5);
    m.broadcast(t, 2).wait();
    got[m.rank()] = values(t);
  });
  for (auto& v : got) CHECK(v == values(input(2, 5)));
}

TEST_CASE("a collective's handle returns at once, the result is there only after every rank joined") {
  local_group g("async", 2);
  auto m0 = g.member(0), m1 = g.member(1);
  tensor a = input(0, 4), b = input(1, 4), c = input(0, 2), d = input(1, 2);
  // Rank 0 starts two collectives before rank 1 starts any: nothing blocks and nothing is done.
  auto h0 = m0->all_reduce(a);
  auto h0b = m0->all_reduce(c, reduce_op::mean);
  CHECK_FALSE(h0.ready());
  CHECK_FALSE(h0b.ready());
  auto h1 = m1->all_reduce(b);
  auto h1b = m1->all_reduce(d, reduce_op::mean);
  h1.wait();
  h0.wait();
  h0b.wait();
  h1b.wait();
  CHECK(h0.ready());
  CHECK(values(a) == values(b));
  CHECK(values(c) == values(d));
  CHECK(a.data()[0] == 0.1f + 0.2f);
}

TEST_CASE("a rank that never joins fails the others' wait after the timeout, naming the group, collective and rank") {
  local_group g("tp stage 1", 3, 100ms);
  auto m0 = g.member(0), m1 = g.member(1);
  tensor a = input(0, 2), b = input(1, 2);
  auto h0 = m0->all_reduce(a);
  auto h1 = m1->all_reduce(b);
  CHECK_THROWS_WITH_AS(h0.wait(),
                       "group 'tp stage 1' all_reduce #0: rank 0 waited 100 ms, but rank 2 never joined",
                       collective_error);
  tensor c = input(0, 2);
  local_group lonely("dp", 3, 50ms);
  auto only = lonely.member(1);
  CHECK_THROWS_WITH_AS(only->broadcast(c, 0).wait(),
                       "group 'dp' broadcast #0: rank 1 waited 50 ms, but ranks 0, 2 never joined", collective_error);
}

TEST_CASE("ranks calling different collectives at the same position fail at once, naming both calls") {
  local_group g("tp", 2);
  auto m0 = g.member(0), m1 = g.member(1);
  tensor a = input(0, 4), b = input(1, 5), out;
  auto h0 = m0->all_reduce(a);
  auto h1 = m1->all_reduce(b);
  const std::string why =
      "group 'tp' collective #0 does not match: rank 1 called all_reduce on (5, 3), rank 0 called all_reduce on "
      "(4, 3): shapes differ";
  CHECK_THROWS_WITH_AS(h0.wait(), (why + " (seen by rank 0)").c_str(), collective_error);
  CHECK_THROWS_WITH_AS(h1.wait(), (why + " (seen by rank 1)").c_str(), collective_error);
  // The next collective lines up again.
  tensor c = input(0, 2), d = input(1, 2);
  auto h2 = m0->broadcast(c, 1);
  auto h3 = m1->all_gather(d, out);
  CHECK_THROWS_WITH_AS(h2.wait(),
                       "group 'tp' collective #1 does not match: rank 1 called all_gather on (2, 3), rank 0 called "
                       "broadcast on (2, 3) (seen by rank 0)",
                       collective_error);
}

TEST_CASE("an aborting rank fails the others' pending and later collectives at once, naming it") {
  local_group g("dp", 2, 30s);  // long timeout: the abort, not the timeout, must end the wait
  auto m0 = g.member(0), m1 = g.member(1);
  tensor a = input(0, 2), b = input(1, 2);
  auto h0 = m0->all_reduce(a);
  std::thread failing([&] { m1->abort("stage 2 backward microbatch 3 threw: out of memory"); });
  failing.join();
  const std::string why = "rank 1 aborted the group: stage 2 backward microbatch 3 threw: out of memory";
  CHECK_THROWS_WITH_AS(h0.wait(), ("group 'dp' all_reduce #0: " + why + " (seen by rank 0)").c_str(),
                       collective_error);
  CHECK_THROWS_WITH_AS(m0->all_reduce(b).wait(), ("group 'dp' all_reduce #1: " + why + " (seen by rank 0)").c_str(),
                       collective_error);
}

TEST_CASE("bad calls are refused before anything is posted") {
  CHECK_THROWS_WITH_AS(local_group("x", 0), "group 'x' needs at least one rank, got 0", std::invalid_argument);
  CHECK_THROWS_AS(local_group("x", 2, 0ms), std::invalid_argument);
  local_group g("tp", 2, 50ms);
  CHECK_THROWS_WITH_AS(g.member(2), "group 'tp' has ranks 0..1, not rank 2", std::out_of_range);
  auto m = g.member(0);
  tensor half = input(0, 2).astype(dtype::bfloat16), t = input(0, 2);
  CHECK_THROWS_WITH_AS(m->all_reduce(half),
                       "group 'tp' all_reduce on rank 0: the tensor is bfloat16 (2, 3), collectives take float32",
                       std::invalid_argument);
  CHECK_THROWS_AS(m->reduce_scatter(t, t), std::invalid_argument);
  CHECK_THROWS_AS(m->broadcast(t, 2), std::out_of_range);
}

TEST_CASE("members and handles outlive their group: later calls fail saying the group is gone") {
  std::unique_ptr<process_group> m;
  collective_handle pending;
  tensor a = input(0, 2), b = input(0, 2);
  {
    local_group g("short-lived", 2);
    m = g.member(0);
    pending = m->all_reduce(a);
  }
  CHECK_THROWS_WITH_AS(pending.wait(),
                       "group 'short-lived' all_reduce #0: group 'short-lived' was destroyed (seen by rank 0)",
                       collective_error);
  CHECK_THROWS_AS(m->all_reduce(b).wait(), collective_error);
}

TEST_CASE("many ranks and many collectives in flight stay in order") {
  const int size = 4, rounds = 50;
  local_group g("stress", size);
  std::atomic<int> mismatches{0};
  on_every_rank(g, [&](process_group& m) {
    std::vector<tensor> ts;
    for (int k = 0; k < rounds; ++k) {
      tensor t = tensor::from_shape({1 + static_cast<std::size_t>(k % 5), 2});
      for (auto& x : t) x = static_cast<float>(k * 10 + m.rank());
      ts.push_back(std::move(t));
    }
    std::vector<collective_handle> hs;
    for (auto& t : ts) hs.push_back(m.all_reduce(t));
    for (auto& h : hs) h.wait();
    for (int k = 0; k < rounds; ++k)
      for (float x : ts[static_cast<std::size_t>(k)])
        if (x != static_cast<float>(k * 10 * size + 0 + 1 + 2 + 3)) ++mismatches;
  });
  CHECK(mismatches == 0);
}

TEST_CASE("a lone rank's group returns at once with a real group's shapes, and the values untouched") {
  lone_rank_group g("tp", 1, 3);
  CHECK((g.rank() == 1 && g.size() == 3 && g.name() == "tp"));
  tensor t = tensor::from_shape({7, 2});
  for (std::size_t i = 0; i < t.size(); ++i) t.data()[i] = static_cast<float>(i);
  const tensor before = t;
  CHECK(g.all_reduce(t).ready());
  CHECK(t == before);
  tensor shard;
  g.reduce_scatter(t, shard).wait();
  CHECK(shard.shape() == shape_t{2, 2});  // rows 3..4 of 7 over 3 ranks (3, 2, 2)
  CHECK(shard.data()[0] == 6.0f);
  tensor gathered;
  g.all_gather(shard, gathered).wait();
  CHECK(gathered.shape() == shape_t{6, 2});
  g.broadcast(t, 2).wait();
  CHECK(t == before);
  CHECK_THROWS_AS(g.broadcast(t, 3), std::invalid_argument);
  CHECK_THROWS_WITH_AS(lone_rank_group("tp", 3, 3), "group 'tp': rank 3 of 3 does not exist", std::invalid_argument);
}

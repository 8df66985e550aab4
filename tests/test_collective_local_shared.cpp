// The shared reduction of local_group (Note [shared reduction] in collective/local_group.cpp): whoever sums a
// chunk (the communication thread or a waiting rank), every result has the bits of a sequential rank-order
// computation, for sizes around and across chunks, with many collectives in flight and waited in any order;
// an abort in the middle of a shared reduction fails every rank at once, and timeouts still fire.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "collective/local_group.hpp"
#include "collective/shard.hpp"
#include "collective_ranks.hpp"
#include "test_support.hpp"

using namespace ap;
using ap::test::on_every_rank;
using namespace std::chrono_literals;

namespace {

constexpr std::size_t chunk = 1 << 14;  // floats in one chunk of work (64 KB)

// Sizes around one chunk and across many: empty, one, odd, one short of and one past a chunk, many chunks.
const std::vector<std::size_t> sizes = {0, 1, 7, 1001, chunk - 1, chunk, chunk + 1, 3 * chunk + 5, 17 * chunk + 333};

// Rank r's input: values of different magnitudes per rank, so that any other order of the sum shows in the
// bits.
tensor input(int rank, const shape_t& shape, std::uint64_t salt = 0) {
  return test::random_tensor(shape, 1000 * salt + static_cast<std::uint64_t>(rank) + 1,
                             1.0f + 37.3f * static_cast<float>(rank % 3));
}

// The reference: ((in_0 + in_1) + in_2) + ..., element by element, then / ranks for a mean.
std::vector<float> rank_order_sum(const std::vector<tensor>& ins, reduce_op op) {
  std::vector<float> sum(ins[0].begin(), ins[0].end());
  for (std::size_t r = 1; r < ins.size(); ++r)
    for (std::size_t i = 0; i < sum.size(); ++i) sum[i] += ins[r].data()[i];
  if (op == reduce_op::mean)
    for (float& x : sum) x /= static_cast<float>(ins.size());
  return sum;
}

// Bit-for-bit equality of `n` floats; says where the first difference is.
bool same_bits(const float* got, const float* want, std::size_t n, std::string& where) {
  for (std::size_t i = 0; i < n; ++i)
    if (std::memcmp(got + i, want + i, sizeof(float)) != 0) {
      where = "element " + std::to_string(i) + ": " + std::to_string(got[i]) + " != " + std::to_string(want[i]);
      return false;
    }
  return true;
}


}  // namespace

TEST_CASE("the reference order matters: summing in another order changes some bits") {
  std::vector<tensor> ins;
  for (int r = 0; r < 4; ++r) ins.push_back(input(r, {1000}));
  std::vector<tensor> reversed(ins.rbegin(), ins.rend());
  const auto a = rank_order_sum(ins, reduce_op::sum), b = rank_order_sum(reversed, reduce_op::sum);
  CHECK(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) != 0);
}

TEST_CASE("all_reduce gives the bits of a sequential rank-order sum, for every size and 2, 3, 4, 8 ranks") {
  for (int d : {2, 3, 4, 8})
    for (reduce_op op : {reduce_op::sum, reduce_op::mean}) {
      CAPTURE(d);
      CAPTURE(reduce_op_name(op));
      local_group g("dp", d);
      std::vector<std::vector<tensor>> ins(sizes.size());
      for (std::size_t s = 0; s < sizes.size(); ++s)
        for (int r = 0; r < d; ++r) ins[s].push_back(input(r, {sizes[s]}, s));
      std::vector<std::vector<tensor>> results = ins;  // each rank reduces its own copy in place
      on_every_rank(g, [&](process_group& m) {
        const auto r = static_cast<std::size_t>(m.rank());
        for (std::size_t s = 0; s < sizes.size(); ++s) m.all_reduce(results[s][r], op).wait();
      });
      for (std::size_t s = 0; s < sizes.size(); ++s) {
        CAPTURE(sizes[s]);
        const auto want = rank_order_sum(ins[s], op);
        for (int r = 0; r < d; ++r) {
          std::string where;
          CHECK_MESSAGE(same_bits(results[s][static_cast<std::size_t>(r)].data(), want.data(), want.size(), where),
                        "rank ", r, " ", where);
        }
      }
    }
}

TEST_CASE("reduce_scatter, all_gather and broadcast across many chunks give the sequential result") {
  for (int d : {2, 3, 4, 8}) {
    CAPTURE(d);
    // Rows of 3001 floats: shards are not whole chunks, and 2 or 3 rows fall on every rank.
    for (std::size_t rows : {std::size_t{0}, std::size_t{1}, std::size_t{2} * d + 1, std::size_t{3} * d}) {
      CAPTURE(rows);
      const shape_t shape{rows, 3001};
      local_group g("tp", d);
      std::vector<tensor> ins, shards(static_cast<std::size_t>(d)), gathered(static_cast<std::size_t>(d)), cast;
      for (int r = 0; r < d; ++r) ins.push_back(input(r, shape, rows));
      cast = ins;
      const int root = d - 1;
      on_every_rank(g, [&](process_group& m) {
        const auto r = static_cast<std::size_t>(m.rank());
        auto h1 = m.reduce_scatter(ins[r], shards[r], reduce_op::mean);
        auto h2 = m.broadcast(cast[r], root);
        h1.wait();
        auto h3 = m.all_gather(shards[r], gathered[r]);
        h3.wait();
        h2.wait();
      });
      const auto want = rank_order_sum(ins, reduce_op::mean);
      for (int r = 0; r < d; ++r) {
        const auto [first, last] = shard_rows(rows, static_cast<std::size_t>(d), static_cast<std::size_t>(r));
        const tensor& shard = shards[static_cast<std::size_t>(r)];
        REQUIRE(shard.shape() == shape_t{last - first, 3001});
        std::string where;
        CHECK_MESSAGE(same_bits(shard.data(), want.data() + first * 3001, shard.size(), where), "shard ", r, " ", where);
        const tensor& all = gathered[static_cast<std::size_t>(r)];
        REQUIRE(all.shape() == shape);
        CHECK_MESSAGE(same_bits(all.data(), want.data(), want.size(), where), "gathered on ", r, " ", where);
        CHECK(cast[static_cast<std::size_t>(r)] == ins[static_cast<std::size_t>(root)]);
      }
    }
  }
}

TEST_CASE("many collectives in flight at once, waited in different orders by different ranks") {
  for (int d : {2, 3, 4, 8}) {
    CAPTURE(d);
    const std::size_t count = 12;
    local_group g("dp", d);
    std::vector<std::vector<tensor>> ins(count), results;
    for (std::size_t k = 0; k < count; ++k)
      for (int r = 0; r < d; ++r) ins[k].push_back(input(r, {sizes[k % sizes.size()] + k}, k));
    results = ins;
    on_every_rank(g, [&](process_group& m) {
      const auto r = static_cast<std::size_t>(m.rank());
      std::vector<collective_handle> hs;
      for (std::size_t k = 0; k < count; ++k) hs.push_back(m.all_reduce(results[k][r]));
      // Rank 0 waits first to last, rank 1 last to first, the others from a rotated start.
      std::vector<std::size_t> order(count);
      for (std::size_t i = 0; i < count; ++i) order[i] = (i + 5 * r) % count;
      if (r == 1) std::reverse(order.begin(), order.end());
      for (std::size_t k : order) hs[k].wait();
      for (auto& h : hs) CHECK(h.ready());
    });
    for (std::size_t k = 0; k < count; ++k) {
      const auto want = rank_order_sum(ins[k], reduce_op::sum);
      for (int r = 0; r < d; ++r) {
        std::string where;
        CHECK_MESSAGE(same_bits(results[k][static_cast<std::size_t>(r)].data(), want.data(), want.size(), where),
                      "collective ", k, " rank ", r, " ", where);
      }
    }
  }
}

TEST_CASE("ranks that start and compute on while the communication thread reduces still get the bits") {
  const int d = 4;
  local_group g("dp", d);
  std::vector<tensor> ins, results;
  for (int r = 0; r < d; ++r) ins.push_back(input(r, {9 * chunk + 1}));
  results = ins;
  on_every_rank(g, [&](process_group& m) {
    const auto r = static_cast<std::size_t>(m.rank());
    auto h = m.all_reduce(results[r]);
    std::this_thread::sleep_for(std::chrono::milliseconds(5 * r));  // ranks arrive at wait() at different times
    h.wait();
  });
  const auto want = rank_order_sum(ins, reduce_op::sum);
  for (auto& t : results) {
    std::string where;
    CHECK_MESSAGE(same_bits(t.data(), want.data(), want.size(), where), where);
  }
}

TEST_CASE("an abort while a shared reduction runs fails every rank at once with the group and the rank") {
  // The abort comes right after the last rank joined, while the communication thread and the waiting
  // ranks sum. On a loaded machine the aborting thread may be descheduled until the sum is done: then
  // every rank must succeed instead. Attempts repeat until one abort lands mid-reduction.
  const int d = 4;
  const std::size_t n = 4 << 20;  // 16 MB per rank: 256 chunks
  const std::string why = "rank 3 aborted the group: stage 1 backward microbatch 2 threw";
  int cancelled = 0, attempts = 0;
  for (; attempts < 20 && cancelled == 0; ++attempts) {
    local_group g("dp", d, 30s);  // long: the abort, not the timeout, must end every wait
    std::vector<tensor> ins, ts;
    for (int r = 0; r < d; ++r) ins.push_back(input(r, {n}));
    ts = ins;
    std::atomic<int> joined{0};
    std::vector<std::string> outcome(d);
    const double seconds = test::seconds_of([&] {
      on_every_rank(g, [&](process_group& m) {
        const auto r = static_cast<std::size_t>(m.rank());
        if (r == 3)  // the last to join, then gives up at once
          while (joined.load() < 3) std::this_thread::yield();
        auto h = m.all_reduce(ts[r]);
        ++joined;
        if (r == 3) m.abort("stage 1 backward microbatch 2 threw");
        try {
          h.wait();
          outcome[r] = "done";
        } catch (const collective_error& e) {
          outcome[r] = e.what();
        }
        CHECK(h.ready());
        ts[r].fill(0.0f);  // its tensor is its own again: nobody else writes it (ThreadSanitizer checks)
        CHECK_THROWS_WITH_AS(m.all_reduce(ts[r]).wait(),
                             ("group 'dp' all_reduce #1: " + why + " (seen by rank " + std::to_string(r) + ")").c_str(),
                             collective_error);
      });
    });
    CHECK(seconds < test::scaled(10.0));
    if (outcome[0] == "done") {
      for (auto& o : outcome) CHECK(o == "done");
      continue;
    }
    ++cancelled;
    for (int r = 0; r < d; ++r)
      CHECK(outcome[static_cast<std::size_t>(r)] ==
            "group 'dp' all_reduce #0: " + why + " (seen by rank " + std::to_string(r) + ")");
  }
  MESSAGE("the abort landed mid-reduction after ", attempts, " attempt(s)");
  CHECK(cancelled == 1);
}

TEST_CASE("an abort by a rank that has not joined cancels the running reduction and fails the open one") {
  // #0 is handed when rank 2 joins and the communication thread sums it, chunk after chunk in order; rank 1,
  // which has not joined #1, aborts right after. Cancelled, #0 fails on every rank and its chunks not yet begun
  // are skipped: its last chunk still holds each rank's own input. On a loaded machine the abort may come only
  // after #0 is done: then every rank has the sum instead. Attempts repeat until one abort lands mid-reduction.
  const int d = 3;
  const std::size_t n = 4 << 20;  // 16 MB per rank: 256 chunks
  const std::string why = ": rank 1 aborted the group: out of memory (seen by rank ";
  int cancelled = 0, attempts = 0;
  for (; attempts < 20 && cancelled == 0; ++attempts) {
    local_group g("dp", d, 30s);  // long: the abort, not the timeout, must end every wait
    auto m0 = g.member(0), m1 = g.member(1), m2 = g.member(2);
    std::vector<tensor> ins, ts;
    for (int r = 0; r < d; ++r) ins.push_back(input(r, {n}));
    ts = ins;
    tensor x = input(0, {5});
    auto h0 = m0->all_reduce(ts[0]);
    auto h1 = m1->all_reduce(ts[1]);
    auto h2 = m2->all_reduce(ts[2]);  // #0 is handed: the communication thread starts on it
    auto open = m0->all_reduce(x);    // #1 waits for ranks 1 and 2
    m1->abort("out of memory");
    CHECK_THROWS_WITH_AS(open.wait(), ("group 'dp' all_reduce #1" + why + "0)").c_str(), collective_error);
    std::vector<std::string> outcome;
    for (auto* h : {&h0, &h1, &h2}) {
      try {
        h->wait();
        outcome.push_back("done");
      } catch (const collective_error& e) {
        outcome.push_back(e.what());
      }
      CHECK(h->ready());
    }
    if (outcome[0] == "done") {  // finished before the abort: the sum, on every rank
      for (auto& o : outcome) CHECK(o == "done");
      const auto want = rank_order_sum(ins, reduce_op::sum);
      for (auto& t : ts) {
        std::string where;
        CHECK_MESSAGE(same_bits(t.data(), want.data(), want.size(), where), where);
      }
      continue;
    }
    ++cancelled;
    for (int r = 0; r < d; ++r) {
      const auto i = static_cast<std::size_t>(r);
      CHECK(outcome[i] == "group 'dp' all_reduce #0" + why + std::to_string(r) + ")");
      std::string where;
      CHECK_MESSAGE(same_bits(ts[i].data() + n - chunk, ins[i].data() + n - chunk, chunk, where), "rank ", r, "'s last chunk ", where);
    }
  }
  MESSAGE("the abort landed mid-reduction after ", attempts, " attempt(s)");
  CHECK(cancelled == 1);
}

TEST_CASE("a rank helping with others' reductions still times out on its own collective") {
  const int d = 3;
  local_group g("dp", d, test::scaled(300ms));
  std::vector<tensor> big, ins;
  for (int r = 0; r < d; ++r) ins.push_back(input(r, {6 * chunk + 3}));
  big = ins;
  tensor small0 = input(0, {3}), small1 = input(1, {3});
  on_every_rank(g, [&](process_group& m) {
    const auto r = static_cast<std::size_t>(m.rank());
    auto h = m.all_reduce(big[r]);
    if (r == 2) {  // never joins #1
      h.wait();
      return;
    }
    auto mine = m.all_reduce(r == 0 ? small0 : small1);
    CHECK_THROWS_WITH_AS(mine.wait(),
                         ("group 'dp' all_reduce #1: rank " + std::to_string(r) + " waited " +
                          std::to_string(test::scaled(300ms).count()) + " ms, but rank 2 never joined")
                             .c_str(),
                         collective_error);
    h.wait();
  });
  const auto want = rank_order_sum(ins, reduce_op::sum);
  for (auto& t : big) {
    std::string where;
    CHECK_MESSAGE(same_bits(t.data(), want.data(), want.size(), where), where);
  }
}

TEST_CASE("a group destroyed while a shared reduction runs completes it first") {
  tensor a = input(0, {5 * chunk}), b = input(1, {5 * chunk});
  const auto want = rank_order_sum({a, b}, reduce_op::sum);
  collective_handle ha, hb;
  {
    local_group g("short-lived", 2);
    auto m0 = g.member(0), m1 = g.member(1);
    ha = m0->all_reduce(a);
    hb = m1->all_reduce(b);
  }
  CHECK(ha.ready());
  CHECK(hb.ready());
  ha.wait();
  hb.wait();
  std::string where;
  CHECK_MESSAGE(same_bits(a.data(), want.data(), want.size(), where), where);
  CHECK_MESSAGE(same_bits(b.data(), want.data(), want.size(), where), where);
}

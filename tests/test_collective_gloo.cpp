// The gloo backend of the groups across processes (collective/gloo_group.hpp, Note [gloo backend]): each rank
// has its own gloo device and sockets on loopback, as separate processes would; ranks run as threads here, and
// across real processes in test_network_data_parallel and `bench_network allreduce`.
#include <doctest/doctest.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <thread>

#include <caf/all.hpp>
#include <caf/io/all.hpp>

#include "actors/message_types.hpp"
#include "collective/by_size_group.hpp"
#include "collective/gloo_group.hpp"
#include "collective/ring_group.hpp"
#include "collective/shard.hpp"
#include "collective_ranks.hpp"
#include "node_process.hpp"  // insecure_transport
#include "test_support.hpp"

using namespace ap;
using namespace std::chrono_literals;

namespace {

using test::filled;
using test::on_every_rank;

// `size` ranks of group `name`, connected with each other's endpoints.
std::vector<std::unique_ptr<gloo_group>> connected(const std::string& name, int size,
                                                   std::chrono::milliseconds timeout = test::scaled(20s)) {
  std::vector<std::unique_ptr<gloo_group>> ranks;
  std::vector<std::string> endpoints;
  for (int r = 0; r < size; ++r) {
    ranks.push_back(std::make_unique<gloo_group>(name, r, size, "127.0.0.1", timeout));
    endpoints.push_back(ranks.back()->endpoint());
  }
  std::vector<std::thread> threads;
  for (auto& g : ranks) threads.emplace_back([&g, &endpoints] { g->connect(endpoints); });
  for (auto& t : threads) t.join();
  return ranks;
}

caf::actor_system_config& network_config(caf::actor_system_config& config) {
  config.load<caf::io::middleman>();
  add_message_types(config);
  config.set("scheduler.max-threads", 2);
  return config;
}

// One "process" of a ring group: its actor system with the middleman (Note [ring security]; without a guarded
// transport the ring runs on CAF's plain one).
struct rank_process {
  caf::actor_system_config config;
  caf::actor_system system{network_config(config)};
};

std::string joined(const std::vector<std::string>& calls) {
  std::string text;
  for (const std::string& c : calls) text += (text.empty() ? "" : ", ") + c;
  return text;
}

// A network_group that records each collective it is given ("all_reduce 60": the kind and its input's bytes)
// and passes it on: which half of a by_size_group ran what.
class recording_group final : public network_group {
 public:
  recording_group(std::unique_ptr<network_group> inner, std::shared_ptr<std::vector<std::string>> calls)
      : inner_(std::move(inner)), calls_(std::move(calls)) {}
  const std::string& name() const override { return inner_->name(); }
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  std::string endpoint() const override { return inner_->endpoint(); }
  void connect(const std::vector<std::string>& endpoints) override { inner_->connect(endpoints); }
  collective_handle all_reduce(tensor& t, reduce_op op) override {
    record("all_reduce", t);
    return inner_->all_reduce(t, op);
  }
  collective_handle reduce_scatter(const tensor& in, tensor& out, reduce_op op) override {
    record("reduce_scatter", in);
    return inner_->reduce_scatter(in, out, op);
  }
  collective_handle all_gather(const tensor& in, tensor& out) override {
    record("all_gather", in);
    return inner_->all_gather(in, out);
  }
  collective_handle broadcast(tensor& t, int root) override {
    record("broadcast", t);
    return inner_->broadcast(t, root);
  }
  void abort(const std::string& reason) override { inner_->abort(reason); }

 private:
  void record(const char* kind, const tensor& t) { calls_->push_back(std::string(kind) + " " + std::to_string(t.byte_size())); }
  std::unique_ptr<network_group> inner_;
  std::shared_ptr<std::vector<std::string>> calls_;
};

}  // namespace

TEST_CASE("gloo all-reduce: 3 ranks get the exact sum and the same bits, several collectives in flight, a mean") {
  auto ranks = connected("dp", 3);
  std::vector<tensor> results(3), means(3), large(3);
  on_every_rank(3, [&](int r) {
    auto& g = *ranks[static_cast<std::size_t>(r)];
    results[static_cast<std::size_t>(r)] = filled({5, 3}, r);
    means[static_cast<std::size_t>(r)] = filled({4}, r);
    // Larger than two 16 MB segments per rank: several segments of the ring.
    large[static_cast<std::size_t>(r)] = filled({std::size_t{9} << 20}, r);
    collective_handle a = g.all_reduce(results[static_cast<std::size_t>(r)]);
    collective_handle b = g.all_reduce(means[static_cast<std::size_t>(r)], reduce_op::mean);
    collective_handle c = g.all_reduce(large[static_cast<std::size_t>(r)]);
    a.wait();
    b.wait();
    c.wait();
  });
  for (std::size_t i = 0; i < 15; ++i) {
    float sum = 0;
    for (int r = 0; r < 3; ++r) sum += filled({5, 3}, r).data()[i];
    CHECK(results[0].data()[i] == sum);
  }
  const tensor one = filled({std::size_t{9} << 20}, 0), two = filled({std::size_t{9} << 20}, 1),
               three = filled({std::size_t{9} << 20}, 2);
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < one.size(); ++i) wrong += large[0].data()[i] != one.data()[i] + two.data()[i] + three.data()[i];
  CHECK(wrong == 0);
  for (int r = 1; r < 3; ++r) {
    CHECK(std::memcmp(results[0].data(), results[static_cast<std::size_t>(r)].data(), results[0].byte_size()) == 0);
    CHECK(std::memcmp(large[0].data(), large[static_cast<std::size_t>(r)].data(), large[0].byte_size()) == 0);
    CHECK(std::memcmp(means[0].data(), means[static_cast<std::size_t>(r)].data(), means[0].byte_size()) == 0);
  }
  for (std::size_t i = 0; i < 4; ++i)
    CHECK(means[0].data()[i] == doctest::Approx((filled({4}, 0).data()[i] + filled({4}, 1).data()[i] + filled({4}, 2).data()[i]) / 3));
}

TEST_CASE("gloo all-gather with rows differing by rank, broadcast from rank 1, reduce-scatter by shard rows") {
  auto ranks = connected("tp", 3);
  std::vector<tensor> gathered(3), broadcast(3), shards(3);
  on_every_rank(3, [&](int r) {
    auto& g = *ranks[static_cast<std::size_t>(r)];
    const tensor mine = filled({static_cast<std::size_t>(r + 1), 2}, r);
    g.all_gather(mine, gathered[static_cast<std::size_t>(r)]).wait();
    broadcast[static_cast<std::size_t>(r)] = filled({6}, r);
    g.broadcast(broadcast[static_cast<std::size_t>(r)], 1).wait();
    const tensor in = filled({7, 2}, r);
    g.reduce_scatter(in, shards[static_cast<std::size_t>(r)]).wait();
  });
  for (int r = 0; r < 3; ++r) {
    const tensor& got = gathered[static_cast<std::size_t>(r)];
    REQUIRE(got.shape() == shape_t{6, 2});
    std::size_t offset = 0;
    for (int owner = 0; owner < 3; ++owner) {
      const tensor piece = filled({static_cast<std::size_t>(owner + 1), 2}, owner);
      CHECK(std::memcmp(got.data() + offset, piece.data(), piece.byte_size()) == 0);
      offset += piece.size();
    }
    CHECK(std::memcmp(broadcast[static_cast<std::size_t>(r)].data(), filled({6}, 1).data(), 6 * sizeof(float)) == 0);
    const auto [first, last] = shard_rows(7, 3, static_cast<std::size_t>(r));
    const tensor& shard = shards[static_cast<std::size_t>(r)];
    REQUIRE(shard.shape() == shape_t{last - first, 2});
    for (std::size_t i = 0; i < shard.size(); ++i) {
      float sum = 0;
      for (int q = 0; q < 3; ++q) sum += filled({7, 2}, q).data()[first * 2 + i];
      CHECK(shard.data()[i] == sum);
    }
  }
}

TEST_CASE("gloo all-gather refuses ranks whose shapes differ after the first axis, naming the rank") {
  auto ranks = connected("tp", 2);
  std::vector<std::string> errors(2);
  on_every_rank(2, [&](int r) {
    const tensor mine = filled({2, static_cast<std::size_t>(r == 0 ? 3 : 2)}, r);  // 6 and 4 floats: rank 1's 4 is not rows of 3
    tensor out;
    try {
      ranks[static_cast<std::size_t>(r)]->all_gather(mine, out).wait();
    } catch (const collective_error& e) {
      errors[static_cast<std::size_t>(r)] = e.what();
    }
  });
  INFO(errors[0]);
  CHECK(test::contains(errors[0], "group 'tp' all_gather #0 on rank 0 (gloo): rank 1 sent 4 floats, not whole rows of 3"));
}

TEST_CASE("gloo abort: the aborting rank's and its peers' waiting collectives fail at once, naming the reason") {
  auto ranks = connected("dp", 3, test::scaled(30s));
  std::vector<std::string> errors(3);
  std::vector<double> took(3);
  on_every_rank(3, [&](int r) {
    auto& g = *ranks[static_cast<std::size_t>(r)];
    tensor t = filled({1000}, r);
    const auto t0 = std::chrono::steady_clock::now();
    try {
      if (r == 0) {
        std::this_thread::sleep_for(200ms);  // ranks 1 and 2 wait inside gloo by now
        g.abort("its backward failed");
      }
      g.all_reduce(t).wait();
    } catch (const collective_error& e) {
      errors[static_cast<std::size_t>(r)] = e.what();
    }
    took[static_cast<std::size_t>(r)] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  });
  CHECK(test::contains(errors[0], "rank 0 aborted the group: its backward failed"));
  for (int r = 1; r < 3; ++r) {
    INFO(errors[static_cast<std::size_t>(r)]);
    CHECK(test::contains(errors[static_cast<std::size_t>(r)], "group 'dp' all_reduce #0 on rank " + std::to_string(r) + " (gloo)"));
    CHECK(took[static_cast<std::size_t>(r)] < test::scaled(5.0));  // the timeout is 30 s
  }
  // A later collective fails at once with the same cause.
  tensor later = filled({4}, 0);
  CHECK_THROWS_WITH_AS(ranks[0]->all_reduce(later).wait(), doctest::Contains("rank 0 aborted the group"), collective_error);
}

TEST_CASE("gloo: a rank that never joins fails the collective after the timeout, naming the group and collective") {
  auto ranks = connected("dp", 2, test::scaled(300ms));  // it bounds their connect too
  tensor t = filled({16}, 0);
  const auto t0 = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH_AS(ranks[0]->all_reduce(t).wait(), doctest::Contains("group 'dp' all_reduce #0 on rank 0 (gloo): gloo:"),
                       collective_error);
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(waited >= 0.25);
  CHECK(waited < test::scaled(5.0));
}

TEST_CASE("gloo connect refuses endpoints that are not gloo's, and a wrong count, naming them") {
  gloo_group g("dp", 0, 2, "127.0.0.1", 300ms);
  CHECK_THROWS_WITH_AS(g.connect({g.endpoint()}), "group 'dp' rank 0: 1 endpoints for 2 ranks", std::invalid_argument);
  CHECK_THROWS_WITH_AS(g.connect({g.endpoint(), "127.0.0.1:4000"}),
                       doctest::Contains("group 'dp' rank 0: rank 1's endpoint is not a gloo endpoint"), collective_error);
  tensor t = filled({4}, 0);
  CHECK_THROWS_WITH_AS(g.all_reduce(t), "group 'dp' rank 0: all_reduce before connect()", collective_error);
  CHECK_THROWS_AS(gloo_group("dp", 2, 2, "127.0.0.1"), std::invalid_argument);
}

TEST_CASE("gloo: a group of one rank needs no peer") {
  auto ranks = connected("solo", 1);
  tensor t = filled({3}, 0), out;
  const tensor before = t;
  ranks[0]->all_reduce(t, reduce_op::mean).wait();
  ranks[0]->all_gather(before, out).wait();
  CHECK(std::memcmp(t.data(), before.data(), before.byte_size()) == 0);
  CHECK(std::memcmp(out.data(), before.data(), before.byte_size()) == 0);
}

TEST_CASE("by-size group (Note [collectives by size]): the ring below the threshold, gloo from it, every all-gather on the ring") {
  // Each rank's two halves are a real ring and a real gloo group, each wrapped to record what it is given: a
  // threshold of 64 bytes splits 16 floats from 15.
  const int size = 3;
  std::vector<std::unique_ptr<rank_process>> processes;
  std::vector<std::unique_ptr<by_size_group>> ranks;
  std::vector<std::shared_ptr<std::vector<std::string>>> on_ring, on_gloo;
  {
    auto gloo = connected("dp", size);
    std::vector<std::unique_ptr<network_group>> rings;
    std::vector<std::string> endpoints;
    for (int r = 0; r < size; ++r) {
      processes.push_back(std::make_unique<rank_process>());
      rings.push_back(std::make_unique<ring_group>(processes.back()->system, "dp", r, size, node_address{"127.0.0.1", 0},
                                                   test::insecure_transport(), test::scaled(20s)));
      endpoints.push_back(rings.back()->endpoint());
    }
    on_every_rank(size, [&](int r) { CHECK_NOTHROW(rings[static_cast<std::size_t>(r)]->connect(endpoints)); });
    for (int r = 0; r < size; ++r) {
      const auto i = static_cast<std::size_t>(r);
      on_ring.push_back(std::make_shared<std::vector<std::string>>());
      on_gloo.push_back(std::make_shared<std::vector<std::string>>());
      ranks.push_back(std::make_unique<by_size_group>(std::make_unique<recording_group>(std::move(rings[i]), on_ring[i]),
                                                      std::make_unique<recording_group>(std::move(gloo[i]), on_gloo[i]),
                                                      64));
    }
  }
  CHECK(&ranks[0]->group_for(60) != &ranks[0]->group_for(64));
  CHECK(&ranks[0]->group_for(0) == &ranks[0]->group_for(63));
  CHECK(&ranks[0]->group_for(64) == &ranks[0]->group_for(std::size_t{1} << 30));
  std::vector<tensor> few(size), many(size), gathered(size), wide(size), shards(size), shard_of_few(size), sent(size),
      edge(size), below(size);
  on_every_rank(size, [&](int r) {
    auto& g = *ranks[static_cast<std::size_t>(r)];
    const auto i = static_cast<std::size_t>(r);
    few[i] = filled({15}, r);
    many[i] = filled({40, 3}, r);
    collective_handle a = g.all_reduce(many[i]);  // the large group's, then the small one's: both in flight
    collective_handle b = g.all_reduce(few[i], reduce_op::mean);
    b.wait(), a.wait();
    g.all_gather(filled({i + 1, 2}, r), gathered[i]).wait();
    g.all_gather(filled({20, 2}, r), wide[i]).wait();  // 160 bytes: still the small group's
    g.reduce_scatter(filled({7, 3}, r), shards[i]).wait();
    g.reduce_scatter(filled({3, 3}, r), shard_of_few[i]).wait();
    sent[i] = filled({20}, r);
    g.broadcast(sent[i], 2).wait();
    edge[i] = filled({16}, r);  // 64 bytes: from the threshold on, the large group's
    g.broadcast(edge[i], 1).wait();
    below[i] = filled({15}, r);
    g.broadcast(below[i], 0).wait();
  });
  for (int r = 0; r < size; ++r) {
    const auto i = static_cast<std::size_t>(r);
    CAPTURE(r);
    const std::string gathered_bytes = std::to_string(8 * (i + 1));
    CHECK(joined(*on_ring[i]) == "all_reduce 60, all_gather " + gathered_bytes + ", all_gather 160, reduce_scatter 36, broadcast 60");
    CHECK(joined(*on_gloo[i]) == "all_reduce 480, reduce_scatter 84, broadcast 80, broadcast 64");
    for (std::size_t k = 0; k < 120; ++k)
      CHECK(many[i].data()[k] == filled({40, 3}, 0).data()[k] + filled({40, 3}, 1).data()[k] + filled({40, 3}, 2).data()[k]);
    CHECK(std::memcmp(few[i].data(), few[0].data(), few[0].byte_size()) == 0);
    CHECK(few[i].data()[3] == doctest::Approx((filled({15}, 0).data()[3] + filled({15}, 1).data()[3] + filled({15}, 2).data()[3]) / 3));
    CHECK(gathered[i].shape() == shape_t{6, 2});
    CHECK(wide[i].shape() == shape_t{60, 2});
    const auto [first, last] = shard_rows(7, 3, i);
    CHECK(shards[i].shape() == shape_t{last - first, 3});
    CHECK(shard_of_few[i].shape() == shape_t{1, 3});
    CHECK(std::memcmp(sent[i].data(), filled({20}, 2).data(), 20 * sizeof(float)) == 0);
    CHECK(std::memcmp(edge[i].data(), filled({16}, 1).data(), 16 * sizeof(float)) == 0);
    CHECK(std::memcmp(below[i].data(), filled({15}, 0).data(), 15 * sizeof(float)) == 0);
  }
  CHECK_THROWS_WITH_AS(ranks[0]->connect({"a b", "c", "d e"}), doctest::Contains("rank 1's endpoint 'c' names one backend, not two"),
                       collective_error);
  ranks[1]->abort("a test");  // both groups: the next collective of either size fails at once
  tensor small_one = filled({2}, 1), large_one = filled({64}, 1);
  CHECK_THROWS_AS(ranks[1]->all_reduce(small_one).wait(), collective_error);
  CHECK_THROWS_AS(ranks[1]->all_reduce(large_one).wait(), collective_error);
  CHECK(on_ring[1]->back() == "all_reduce 8");
  CHECK(on_gloo[1]->back() == "all_reduce 256");
  ranks.clear();  // the ring groups before their actor systems
}

TEST_CASE("gloo abort while this rank's own collective waits inside gloo: that collective fails at once too") {
  // Why abort() fails the pairs' waiting buffers rather than only closing the sockets (Note [gloo backend]).
  auto ranks = connected("dp", 2, 30s);
  tensor t = filled({1000}, 0);
  const auto t0 = std::chrono::steady_clock::now();
  collective_handle waiting = ranks[0]->all_reduce(t);  // rank 1 never joins: rank 0 waits inside gloo
  std::thread aborter([&] {
    std::this_thread::sleep_for(200ms);
    ranks[0]->abort("its backward failed");
  });
  CHECK_THROWS_WITH_AS(waiting.wait(), doctest::Contains("rank 0 aborted the group: its backward failed"), collective_error);
  aborter.join();
  CHECK(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < test::scaled(5.0));  // not 30 s
}

TEST_CASE("by-size as a node makes it (make_network_group): 4 MB less one float on the ring, 4 MB on gloo") {
  // The default threshold, 4 MB (Note [collectives by size]). Rank 1 joins neither all-reduce: which backend ran
  // each shows in how rank 0's wait fails, the ring's naming the step and chunk it waited for, gloo's saying it is
  // gloo. The groups' timeout bounds their connect too.
  const auto timeout = test::scaled(1s);
  std::vector<std::unique_ptr<rank_process>> processes;
  std::vector<std::unique_ptr<network_group>> ranks;
  std::vector<std::string> endpoints;
  for (int r = 0; r < 2; ++r) {
    processes.push_back(std::make_unique<rank_process>());
    ranks.push_back(make_network_group(collective_backend::by_size, processes.back()->system, "dp", r, 2, "127.0.0.1", timeout));
    endpoints.push_back(ranks.back()->endpoint());
  }
  on_every_rank(2, [&](int r) { CHECK_NOTHROW(ranks[static_cast<std::size_t>(r)]->connect(endpoints)); });
  CHECK(by_size_group::default_threshold_bytes == std::size_t{4} << 20);
  CHECK(describe_collective_backend(collective_backend::by_size) == "by-size: the ring below 4 MB, gloo from 4 MB");
  tensor below = filled({(std::size_t{1} << 20) - 1}, 0), from = filled({std::size_t{1} << 20}, 0);
  const std::string on_ring = test::error_of([&] { ranks[0]->all_reduce(below).wait(); });
  const std::string on_gloo = test::error_of([&] { ranks[0]->all_reduce(from).wait(); });
  INFO(on_ring);
  INFO(on_gloo);
  CHECK(test::contains(on_ring, "group 'dp' all_reduce #0 on rank 0: waited "));
  CHECK(test::contains(on_ring, " for step 0 chunk 0 from rank 1"));
  CHECK(test::contains(on_gloo, "group 'dp' all_reduce #0 on rank 0 (gloo): gloo:"));
  ranks.clear();
}


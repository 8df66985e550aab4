// Collectives across processes (collective/ring_group.hpp): each rank has its own CAF actor system with
// its own middleman, talking over real TCP on loopback, as separate processes would.
#include <doctest/doctest.h>

#include <atomic>
#include <functional>
#include <memory>
#include <thread>

#include <caf/all.hpp>
#include <caf/io/all.hpp>

#include "collective/local_group.hpp"
#include "collective/ring_group.hpp"
#include "collective/shard.hpp"
#include "network/guarded_transport.hpp"
#include "network/ring_messages.hpp"
#include "actors/message_types.hpp"
#include "memory_reads.hpp"
#include "node_process.hpp"  // test certificates
#include "test_support.hpp"

using namespace ap;
using namespace std::chrono_literals;

namespace {

caf::actor_system_config& network_config(caf::actor_system_config& config) {
  config.load<caf::io::middleman>();
  add_message_types(config);
  config.set("scheduler.max-threads", 2);
  return config;
}

// One "process": an actor system, optionally its guarded transport (Note [ring security]), and its rank.
struct rank_process {
  caf::actor_system_config config;
  caf::actor_system system{network_config(config)};
  std::unique_ptr<guarded_transport> transport;
  std::unique_ptr<ring_group> group;
};

// Plain TCP (most tests: the collectives, not the transport, are under test) or mutual TLS.
transport_security plain() { return test::insecure_transport(); }

// `size` ranks of group `name`, rank r with security[r] (or the last entry), before connecting, each listening on
// `host`: 127.0.0.1, where a link's two ends have one address and chunks are copied out of the left neighbour's
// memory (Note [one copy in the ring]), or 127.0.0.2, where the connecting end is 127.0.0.1 and chunks travel on
// the links.
std::vector<std::unique_ptr<rank_process>> make_ranks(const std::string& name, int size, std::chrono::milliseconds timeout,
                                                      std::size_t chunk_bytes, const std::vector<transport_security>& security,
                                                      const std::string& host = "127.0.0.1") {
  std::vector<std::unique_ptr<rank_process>> ranks;
  for (int r = 0; r < size; ++r) {
    ranks.push_back(std::make_unique<rank_process>());
    const auto& sec = security[std::min<std::size_t>(static_cast<std::size_t>(r), security.size() - 1)];
    ranks.back()->group = std::make_unique<ring_group>(ranks.back()->system, name, r, size,
                                                       node_address{host, 0}, sec, timeout, chunk_bytes);
  }
  return ranks;
}

std::vector<node_address> addresses_of(const std::vector<std::unique_ptr<rank_process>>& ranks, const std::string& host = "127.0.0.1") {
  std::vector<node_address> addresses;
  for (const auto& r : ranks) addresses.push_back({host, r->group->port()});
  return addresses;
}

// connect() on one thread per rank, as it would run in separate processes; each rank's error ("" if none).
std::vector<std::string> connect_all(std::vector<std::unique_ptr<rank_process>>& ranks, const std::string& host = "127.0.0.1") {
  const auto addresses = addresses_of(ranks, host);
  std::vector<std::thread> threads;
  std::vector<std::string> errors(ranks.size());
  for (std::size_t r = 0; r < ranks.size(); ++r)
    threads.emplace_back([&, r] {
      try {
        ranks[r]->group->connect(addresses);
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  return errors;
}

// `size` ranks of group `name`, each connected to the others. chunk_bytes small, so tensors travel in
// many chunks.
std::vector<std::unique_ptr<rank_process>> make_ring(const std::string& name, int size,
                                                     std::chrono::milliseconds timeout = test::scaled(20s),
                                                     std::size_t chunk_bytes = 64,
                                                     const transport_security& security = plain(),
                                                     const std::string& host = "127.0.0.1") {
  auto ranks = make_ranks(name, size, timeout, chunk_bytes, {security}, host);
  for (auto& e : connect_all(ranks, host)) REQUIRE_MESSAGE(e.empty(), e);
  // In place exactly where both ends have one address and the kernel allows it (Note [one copy in the ring]).
  for (const auto& r : ranks) CHECK(r->group->copies_from_left() == (host == "127.0.0.1" && test::memory_reads_allowed()));
  return ranks;
}

// The two ways chunks travel (make_ranks).
const std::vector<std::string> both_ways = {"127.0.0.1", "127.0.0.2"};

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// Runs body(group) on one thread per rank and rethrows the first failure.
void on_every_rank(std::vector<std::unique_ptr<rank_process>>& ranks, const std::function<void(process_group&)>& body) {
  std::vector<std::thread> threads;
  std::vector<std::string> errors(ranks.size());
  for (std::size_t r = 0; r < ranks.size(); ++r)
    threads.emplace_back([&, r] {
      try {
        body(*ranks[r]->group);
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  for (auto& e : errors) REQUIRE_MESSAGE(e.empty(), e);
}

tensor input(int rank, std::size_t rows) {
  tensor t = tensor::from_shape({rows, 3});
  for (std::size_t i = 0; i < t.size(); ++i) t.data()[i] = 0.1f * static_cast<float>(rank + 1) + 0.37f * i;
  return t;
}

std::vector<float> values(const tensor& t) { return std::vector<float>(t.begin(), t.end()); }

}  // namespace

TEST_CASE("ring all_reduce over 2 and 3 processes: the sum (and mean), the same bits on every rank") {
  for (const std::string& host : both_ways)
  for (int size : {2, 3}) {
    CAPTURE(host);
    CAPTURE(size);
    auto ranks = make_ring("dp", size, test::scaled(20s), 64, plain(), host);
    const std::size_t rows = 101;  // 303 floats: uneven segments, 16-float chunks
    std::vector<double> sum(rows * 3, 0.0);
    for (int r = 0; r < size; ++r) {
      const auto x = values(input(r, rows));
      for (std::size_t i = 0; i < sum.size(); ++i) sum[i] += x[i];
    }
    std::vector<std::vector<float>> got_sum(size), got_mean(size);
    on_every_rank(ranks, [&](process_group& g) {
      tensor a = input(g.rank(), rows), b = input(g.rank(), rows);
      auto ha = g.all_reduce(a);
      auto hb = g.all_reduce(b, reduce_op::mean);  // two in flight at once
      ha.wait();
      hb.wait();
      got_sum[g.rank()] = values(a);
      got_mean[g.rank()] = values(b);
    });
    for (int r = 0; r < size; ++r) {
      CHECK(got_sum[r] == got_sum[0]);
      CHECK(got_mean[r] == got_mean[0]);
    }
    for (std::size_t i = 0; i < sum.size(); ++i) {
      CHECK(got_sum[0][i] == doctest::Approx(sum[i]).epsilon(1e-6));
      CHECK(got_mean[0][i] == doctest::Approx(sum[i] / size).epsilon(1e-6));
    }
  }
}

TEST_CASE("chunks larger than a socket takes at once: the communication thread writes the start, its writer the rest") {
  // A 4 MB chunk meets a fresh loopback socket's buffer of far less, so each send writes part of it and hands the rest,
  // from where it stopped, to the writer thread (Note [writes without waiting]).
  auto ranks = make_ring("big", 2, test::scaled(20s), std::size_t{4} << 20, plain(), "127.0.0.2");  // the chunks on the links
  const std::size_t rows = (std::size_t{3} << 20) / 3;  // 12 MB of floats: 6 MB segments, a 4 MB and a 2 MB chunk
  std::vector<tensor> reduced(2), broadcasted(2);
  on_every_rank(ranks, [&](process_group& g) {
    reduced[g.rank()] = input(g.rank(), rows);
    g.all_reduce(reduced[g.rank()]).wait();
    broadcasted[g.rank()] = input(g.rank(), rows);
    g.broadcast(broadcasted[g.rank()], 0).wait();
  });
  const tensor a = input(0, rows), b = input(1, rows);
  std::vector<float> sum(a.size());
  for (std::size_t i = 0; i < sum.size(); ++i) sum[i] = a.data()[i] + b.data()[i];  // two ranks: one add, either order
  for (int r = 0; r < 2; ++r) {
    CAPTURE(r);
    CHECK(values(reduced[r]) == sum);
    CHECK(values(broadcasted[r]) == values(a));
  }
}

TEST_CASE("ring reduce_scatter, all_gather with uneven shards, and broadcast across 3 processes") {
  for (const std::string& host : both_ways) {
  CAPTURE(host);
  const int size = 3;
  auto ranks = make_ring("tp", size, test::scaled(20s), 64, plain(), host);
  const std::size_t rows = 7;
  std::vector<float> sum = values(input(0, rows));
  for (int r = 1; r < size; ++r) {
    const auto x = values(input(r, rows));
    for (std::size_t i = 0; i < sum.size(); ++i) sum[i] += x[i];
  }
  std::vector<tensor> shards(size), gathered(size), broadcasted(size);
  on_every_rank(ranks, [&](process_group& g) {
    const tensor in = input(g.rank(), rows);
    g.reduce_scatter(in, shards[g.rank()]).wait();
    g.all_gather(shards[g.rank()], gathered[g.rank()]).wait();
    broadcasted[g.rank()] = input(g.rank(), 40);
    g.broadcast(broadcasted[g.rank()], 1).wait();
  });
  for (int r = 0; r < size; ++r) {
    const auto [first, last] = shard_rows(rows, size, r);
    REQUIRE(shards[r].shape() == shape_t{last - first, 3});
    for (std::size_t i = 0; i < shards[r].size(); ++i)
      CHECK(shards[r].data()[i] == doctest::Approx(sum[first * 3 + i]).epsilon(1e-6));
    CHECK(gathered[r].shape() == shape_t{rows, 3});
    CHECK(values(gathered[r]) == values(gathered[0]));
    CHECK(values(broadcasted[r]) == values(input(1, 40)));
  }
  }
}

TEST_CASE("a rank that never joins times out naming it, a rank that goes fails the others at once") {
  const auto timeout = test::scaled(300ms);  // it bounds the ranks' connect too
  auto ranks = make_ring("dp", 2, timeout);
  tensor a = input(0, 4);
  const std::string peer = "rank 1 (127.0.0.1:" + std::to_string(ranks[1]->group->port()) + ")";
  CHECK_THROWS_WITH_AS(ranks[0]->group->all_reduce(a).wait(),
                       ("group 'dp' all_reduce #0 on rank 0: waited " + std::to_string(timeout.count()) +
                        " ms for step 0 chunk 0 from " + peer +
                        ", which sent nothing").c_str(),
                       collective_error);
  auto slow = make_ring("pp", 2, 20s);  // a long timeout: the peer's going, not the timeout, must end it
  slow[1]->group.reset();
  tensor b = input(0, 4);
  const auto started = std::chrono::steady_clock::now();
  try {
    slow[0]->group->all_reduce(b).wait();
    FAIL("the all_reduce succeeded without its peer");
  } catch (const collective_error& e) {
    CHECK(std::string(e.what()).find("group 'pp' all_reduce #0 on rank 0: rank 1 at 127.0.0.1:") == 0);
    CHECK(std::string(e.what()).find("is gone") != std::string::npos);
  }
  CHECK(std::chrono::steady_clock::now() - started < test::scaled(15s));
}

TEST_CASE("an aborting rank fails its peers' collectives, naming it and the reason") {
  auto ranks = make_ring("dp", 2, test::scaled(20s));
  tensor a = input(0, 4);
  auto h = ranks[0]->group->all_reduce(a);
  ranks[1]->group->abort("stage 1 forward microbatch 2 threw");
  CHECK_THROWS_WITH_AS(h.wait(), "group 'dp' all_reduce #0 on rank 0: rank 1 aborted the group: stage 1 forward microbatch 2 threw",
                       collective_error);
}

TEST_CASE("connect names the rank it cannot reach, and a peer of another group") {
  rank_process lonely;
  ring_group g(lonely.system, "dp", 0, 2, node_address{"127.0.0.1", 0}, plain(), 300ms);
  // A port nobody listens on (this rank's own port + nothing): take a free one and close it.
  rank_process other;
  auto closed_port = std::make_unique<ring_group>(other.system, "x", 0, 1, node_address{"127.0.0.1", 0}, plain(), 300ms);
  const std::uint16_t port = closed_port->port();
  closed_port.reset();
  try {
    g.connect(std::vector<node_address>{{"127.0.0.1", 0}, {"127.0.0.1", port}});
    FAIL("connected to nobody");
  } catch (const collective_error& e) {
    CHECK(std::string(e.what()).find("group 'dp' rank 0 cannot reach rank 1 at 127.0.0.1:" + std::to_string(port) +
                                     " within 300 ms") == 0);
  }
  rank_process stranger_process;
  ring_group stranger(stranger_process.system, "tp", 1, 2, node_address{"127.0.0.1", 0}, plain(), test::scaled(2s));
  ring_group mine(lonely.system, "dp", 0, 2, node_address{"127.0.0.1", 0}, plain(), test::scaled(2s));
  CHECK_THROWS_WITH_AS(mine.connect(std::vector<node_address>{{"127.0.0.1", 0}, {"127.0.0.1", stranger.port()}}),
                       ("group 'dp' rank 0: 127.0.0.1:" + std::to_string(stranger.port()) +
                        " is rank 1 of group 'tp', expected rank 1 of group 'dp'").c_str(),
                       collective_error);
}

TEST_CASE("a lost hello is sent again: the group connects within its timeout, not after it") {
  // Rank 1 here is an actor that lets the first hello go unanswered, as a hello lost
  // with a dropped connection would be, and answers the next as rank 1 of another group; without the second hello
  // connect would wait its whole timeout and fail with request_timeout (Note [a hello sent again]).
  rank_process peer_process;
  auto hellos = std::make_shared<std::atomic<int>>(0);
  auto promises = std::make_shared<std::vector<caf::response_promise>>();
  caf::actor fake = peer_process.system.spawn([hellos, promises](caf::event_based_actor* self) -> caf::behavior {
    return {[=](ring_hello_atom, const std::string&, std::int32_t, std::int32_t, caf::actor&,
                std::int32_t) -> caf::result<std::string, std::int32_t, std::int32_t> {
      if (hellos->fetch_add(1) == 0) {
        promises->push_back(self->make_response_promise());  // kept, never delivered
        return caf::delegated<std::string, std::int32_t, std::int32_t>{};
      }
      return {std::string("tp"), std::int32_t{1}, std::int32_t{9}};
    }};
  });
  // Published as a rank's endpoint is: plain TCP in checked records (Note [checked records]).
  peer_process.transport = std::make_unique<guarded_transport>(peer_process.system, plain(), transport_options{});
  auto port = peer_process.transport->publish(fake, 0, "127.0.0.1", false);
  REQUIRE(port);
  rank_process mine_process;
  const auto timeout = test::scaled(60s);
  ring_group mine(mine_process.system, "dp", 0, 2, node_address{"127.0.0.1", 0}, plain(), timeout);
  const auto start = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH_AS(mine.connect(std::vector<node_address>{{"127.0.0.1", 0}, {"127.0.0.1", *port}}),
                       ("group 'dp' rank 0: 127.0.0.1:" + std::to_string(*port) +
                        " is rank 1 of group 'tp', expected rank 1 of group 'dp'").c_str(),
                       collective_error);
  CHECK(hellos->load() == 2);
  CHECK(std::chrono::steady_clock::now() - start < timeout / 2);
  caf::anon_send_exit(fake, caf::exit_reason::user_shutdown);
}

TEST_CASE("a ring over mutual TLS: all_reduce gives local_group's bits, and chunks larger than a TLS record") {
  for (const std::string& host : both_ways) {
  CAPTURE(host);
  const std::size_t rows = 5000;  // 15000 floats: 2 segments of 30 KB in chunks of 16 KB (a TLS record each)
  auto ranks = make_ring("dp", 2, test::scaled(20s), 16 << 10, test::tls_security("node"), host);
  std::vector<std::vector<float>> ring(2), local(2);
  on_every_rank(ranks, [&](process_group& g) {
    tensor a = input(g.rank(), rows);
    g.all_reduce(a).wait();
    ring[g.rank()] = values(a);
  });
  local_group reference("dp", 2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      auto g = reference.member(r);
      tensor a = input(r, rows);
      g->all_reduce(a).wait();
      local[r] = values(a);
    });
  for (auto& t : threads) t.join();
  CHECK(ring[0] == local[0]);  // two terms: a + b == b + a exactly, whatever the order of the sum
  CHECK(ring[1] == local[1]);
  }
}

TEST_CASE("a peer without the cluster's certificate cannot join a TLS ring: both sides name each other") {
  const transport_security mine = test::tls_security("node");
  for (const auto& intruder : {test::tls_security("node", "other CA"), test::insecure_transport()}) {
    CAPTURE(intruder.describe());
    // The intruder as rank 0 connects to rank 1 (Note [one connection per pair]); then as rank 1.
    for (int bad : {0, 1}) {
      CAPTURE(bad);
      std::vector<transport_security> security{mine, mine};
      security[static_cast<std::size_t>(bad)] = intruder;
      auto ranks = make_ranks("dp", 2, 1500ms, 64, security);
      const auto addresses = addresses_of(ranks);
      const auto started = std::chrono::steady_clock::now();
      const auto errors = connect_all(ranks);
      CHECK(std::chrono::steady_clock::now() - started < test::scaled(10s));  // the timeout is 1.5 s; generous under load
      INFO(errors[0]);
      INFO(errors[1]);
      // Rank 0 connects: it is refused at once, naming rank 1 and its address.
      CHECK(contains(errors[0], "group 'dp' rank 0 cannot join rank 1 at " + addresses[1].text()));
      CHECK(contains(errors[0], "the ranks disagree on TLS"));
      // Rank 1 waits for rank 0, which never got through: named with its address after the timeout, with
      // the connection rank 1's transport dropped and why (a TLS failure; BASP garbage on a plain one).
      CHECK(contains(errors[1], "group 'dp' rank 1: rank 0 at " + addresses[0].text() + " did not connect within 1500 ms"));
      CHECK(contains(errors[1], "this rank's transport dropped a connection from 127.0.0.1:"));
    }
  }
}

TEST_CASE("rings through the process's own guarded transport (a node's): TLS bits, a peer of another CA cannot join") {
  // The constructor without a transport_security, as a node's stages use it (Note [ring security]).
  const auto tls_rank = [](const transport_security& security, int rank, int size, std::chrono::milliseconds timeout) {
    auto p = std::make_unique<rank_process>();
    p->transport = std::make_unique<guarded_transport>(p->system, security, transport_options{});
    p->group = std::make_unique<ring_group>(p->system, "tls ring", rank, size, node_address{"127.0.0.1", 0}, timeout, 64);
    return p;
  };
  {
    std::vector<std::unique_ptr<rank_process>> ranks;
    for (int r = 0; r < 3; ++r) ranks.push_back(tls_rank(test::tls_security(r == 0 ? "coordinator" : "node"), r, 3, test::scaled(20s)));
    for (auto& e : connect_all(ranks)) REQUIRE_MESSAGE(e.empty(), e);
    std::vector<tensor> sums(3);
    on_every_rank(ranks, [&](process_group& g) {
      tensor t = input(g.rank(), 40);
      g.all_reduce(t).wait();
      sums[static_cast<std::size_t>(g.rank())] = t;
    });
    tensor expected = input(0, 40);
    for (int r = 1; r < 3; ++r)
      for (std::size_t i = 0; i < expected.size(); ++i) expected.data()[i] += input(r, 40).data()[i];
    for (const tensor& s : sums) CHECK(test::check_close(s, expected, 1e-6, 1e-6, "TLS all-reduce"));
  }
  // Rank 1 holds a certificate of another CA: rank 0 cannot reach it, and says whom, within the timeout.
  auto good = tls_rank(test::tls_security("coordinator"), 0, 2, 3s);
  auto rogue = tls_rank(test::tls_security("node", "rogue"), 1, 2, 3s);
  const std::vector<node_address> addresses{{"127.0.0.1", good->group->port()}, {"127.0.0.1", rogue->group->port()}};
  std::string failure;
  std::thread other([&] {
    try {
      rogue->group->connect(addresses);
    } catch (const std::exception&) {
    }
  });
  const double took = test::seconds_of([&] { failure = test::error_of([&] { good->group->connect(addresses); }); });
  other.join();
  INFO(failure);
  CHECK(test::contains(failure, "rank 1 at 127.0.0.1:" + std::to_string(rogue->group->port())));
  CHECK(took < test::scaled(10.0));
}

// The communicator: point-to-point tensors, ordering, concurrency, barrier, shutdown, timeouts,
// invalid ranks, multi-stage forward/backward traffic, self-sends, a 256 MB zero-copy transfer, and the
// wire format of forward_task / backward_task.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <caf/all.hpp>
#include <caf/binary_deserializer.hpp>
#include <caf/binary_serializer.hpp>

#include "actors/actor_communicator.hpp"
#include "equivalence.hpp"
#include "network/communicator.hpp"
#include "actors/messages.hpp"
#include "tensor/tensor.hpp"
#include "test_support.hpp"

using namespace ap;
using namespace std::chrono_literals;

namespace {

using namespace ap::test;

using clock_type = std::chrono::steady_clock;

// A tensor whose element i is offset + i * 0.25 (distinct, exactly representable values).
tensor ramp(const shape_t& shape, float offset) {
  tensor t = tensor::from_shape(shape);
  for (std::size_t i = 0; i < t.size(); ++i) t.data()[i] = offset + static_cast<float>(i) * 0.25f;
  return t;
}

// Shapes equal and every element equal, bit for bit; on a mismatch names the first differing element.
void check_tensor(const tensor& actual, const tensor& expected, const std::string& label) {
  REQUIRE(test::check_tensor(actual, expected, 0.0f, label));
}

forward_task make_forward(int step, int microbatch, int chunk, int first_sample, tensor data) {
  forward_task t;
  t.step = step;
  t.microbatch = microbatch;
  t.chunk = chunk;
  t.source = -77;  // the communicator must overwrite it with the sender's rank
  t.first_sample = first_sample;
  t.data = std::move(data);
  return t;
}

backward_task make_backward(int step, int microbatch, int chunk, int first_sample, tensor data) {
  backward_task t;
  t.step = step;
  t.microbatch = microbatch;
  t.chunk = chunk;
  t.source = -77;
  t.first_sample = first_sample;
  t.data = std::move(data);
  return t;
}

long long ms_since(clock_type::time_point start) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(clock_type::now() - start).count();
}

// Runs `call`, requires it to throw E, and returns the exception's text.
template <class E, class F>
std::string thrown_text(F&& call) {
  try {
    call();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    FAIL("threw the wrong exception type: " << e.what());
  }
  FAIL("did not throw");
  return {};
}

}  // namespace

// ---- two ranks -----------------------------------------------------------------------------------------

TEST_CASE("send_forward/receive_forward between two ranks keeps values, shape and task fields") {
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  local_world world{sys, 2, test::scaled(5s)};
  CHECK(world.size() == 2);
  CHECK(world.at(0).rank() == 0);
  CHECK(world.at(1).rank() == 1);
  CHECK(world.at(1).world_size() == 2);
  CHECK(world.at(1).timeout() == test::scaled(5s));

  const tensor expected = ramp({2, 3}, 1.5f);
  world.at(0).send_forward(make_forward(7, 5, 1, 40, expected), 1);
  forward_task got = world.at(1).receive_forward(0);
  CHECK(got.step == 7);
  CHECK(got.microbatch == 5);
  CHECK(got.chunk == 1);
  CHECK(got.first_sample == 40);
  CHECK(got.source == 0);
  check_tensor(got.data, expected, "forward 0 -> 1");
}

TEST_CASE("send_backward/receive_backward between two ranks keeps values, shape and task fields") {
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  local_world world{sys, 2, test::scaled(5s)};

  const tensor expected = ramp({4, 2, 3}, -3.0f);
  world.at(1).send_backward(make_backward(2, 9, 3, 12, expected), 0);
  backward_task got = world.at(0).receive_backward(1);
  CHECK(got.step == 2);
  CHECK(got.microbatch == 9);
  CHECK(got.chunk == 3);
  CHECK(got.first_sample == 12);
  CHECK(got.source == 1);
  check_tensor(got.data, expected, "backward 1 -> 0");
}

TEST_CASE("send/receive of a plain tensor between two ranks, both directions") {
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  local_world world{sys, 2, test::scaled(5s)};

  const tensor a = ramp({5}, 10.0f);
  const tensor b = ramp({3, 1, 2}, -1.0f);
  world.at(0).send(tensor(a), 1);
  world.at(1).send(tensor(b), 0);
  check_tensor(world.at(1).receive(0), a, "plain 0 -> 1");
  check_tensor(world.at(0).receive(1), b, "plain 1 -> 0");
}

TEST_CASE("a receive blocked before the send gets the tensor when it arrives") {
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  local_world world{sys, 2, test::scaled(5s)};

  const tensor expected = ramp({2, 2}, 4.0f);
  forward_task got;
  std::thread receiver([&] { got = world.at(1).receive_forward(0); });
  std::this_thread::sleep_for(50ms);
  world.at(0).send_forward(make_forward(1, 2, 0, 0, expected), 1);
  receiver.join();
  CHECK(got.source == 0);
  CHECK(got.microbatch == 2);
  check_tensor(got.data, expected, "late send");
}

TEST_CASE("forward, backward and plain tensors, and different sources, are kept apart") {
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  local_world world{sys, 3, test::scaled(5s)};

  // Everything lands in rank 1's inbox; receives ask in a different order than the sends.
  world.at(0).send_forward(make_forward(0, 1, 0, 0, ramp({2}, 100.0f)), 1);
  world.at(0).send(ramp({2}, 200.0f), 1);
  world.at(2).send_backward(make_backward(0, 1, 0, 0, ramp({2}, 300.0f)), 1);
  world.at(2).send_forward(make_forward(0, 8, 0, 0, ramp({2}, 400.0f)), 1);
  world.at(0).send_backward(make_backward(0, 3, 0, 0, ramp({2}, 500.0f)), 1);

  check_tensor(world.at(1).receive(0), ramp({2}, 200.0f), "plain from 0");
  backward_task b0 = world.at(1).receive_backward(0);
  CHECK(b0.source == 0);
  CHECK(b0.microbatch == 3);
  check_tensor(b0.data, ramp({2}, 500.0f), "backward from 0");
  forward_task f2 = world.at(1).receive_forward(2);
  CHECK(f2.source == 2);
  CHECK(f2.microbatch == 8);
  check_tensor(f2.data, ramp({2}, 400.0f), "forward from 2");
  forward_task f0 = world.at(1).receive_forward(0);
  CHECK(f0.source == 0);
  check_tensor(f0.data, ramp({2}, 100.0f), "forward from 0");
  backward_task b2 = world.at(1).receive_backward(2);
  CHECK(b2.source == 2);
  check_tensor(b2.data, ramp({2}, 300.0f), "backward from 2");
}

// ---- ordering and concurrency --------------------------------------------------------------------------

TEST_CASE("multiple sequential sends arrive in the order they were sent") {
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  local_world world{sys, 2, test::scaled(5s)};
  constexpr int n = 200;

  for (int i = 0; i < n; ++i) {
    world.at(0).send_forward(make_forward(0, i, 0, i, ramp({3}, float(i))), 1);
    world.at(0).send_backward(make_backward(0, i, 0, i, ramp({3}, float(-i))), 1);
    world.at(0).send(ramp({1}, float(i) * 2.0f), 1);
  }
  for (int i = 0; i < n; ++i) {
    forward_task f = world.at(1).receive_forward(0);
    REQUIRE(f.microbatch == i);
    check_tensor(f.data, ramp({3}, float(i)), "forward #" + std::to_string(i));
  }
  for (int i = 0; i < n; ++i) {
    backward_task b = world.at(1).receive_backward(0);
    REQUIRE(b.microbatch == i);
    check_tensor(b.data, ramp({3}, float(-i)), "backward #" + std::to_string(i));
  }
  for (int i = 0; i < n; ++i) check_tensor(world.at(1).receive(0), ramp({1}, float(i) * 2.0f), "plain #" + std::to_string(i));
}

TEST_CASE("concurrent sends from several threads and concurrent receives deliver everything exactly once") {
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  constexpr int senders = 4;     // ranks 1..4 send to rank 0
  constexpr int per_sender = 100;
  constexpr int receivers_per_source = 2;
  local_world world{sys, senders + 1, test::scaled(5s)};

  std::mutex mutex;
  std::multiset<int> seen;             // value = source * 1000 + index
  std::vector<std::string> problems;   // collected in threads, checked on the main thread

  std::vector<std::thread> threads;
  // Receivers first, so most receives wait in the inbox while sends arrive.
  for (int source = 1; source <= senders; ++source)
    for (int k = 0; k < receivers_per_source; ++k)
      threads.emplace_back([&, source] {
        int previous = -1;
        for (int i = 0; i < per_sender / receivers_per_source; ++i) {
          forward_task t = world.at(0).receive_forward(source);
          const int value = static_cast<int>(t.data.data()[0]);
          std::lock_guard<std::mutex> lock(mutex);
          if (t.source != source) problems.push_back("wrong source " + std::to_string(t.source));
          if (t.microbatch != value % 1000) problems.push_back("microbatch does not match payload");
          // One receiver's receives are sequential, so what it gets must be in the sender's order.
          if (value <= previous) problems.push_back("out of order from " + std::to_string(source));
          previous = value;
          seen.insert(value);
        }
      });
  for (int source = 1; source <= senders; ++source)
    threads.emplace_back([&, source] {
      for (int i = 0; i < per_sender; ++i) {
        tensor data = tensor::from_shape({2, 2});
        data.fill(float(source * 1000 + i));
        world.at(source).send_forward(make_forward(0, i, 0, 0, std::move(data)), 0);
      }
    });
  // Plus several threads sharing one communicator (rank 1) to send plain tensors to rank 2.
  for (int k = 0; k < 3; ++k)
    threads.emplace_back([&, k] {
      for (int i = 0; i < 50; ++i) world.at(1).send(ramp({1}, float(k * 1000 + i)), 2);
    });
  for (auto& t : threads) t.join();

  CHECK(problems.empty());
  for (const auto& p : problems) INFO(p);
  REQUIRE(seen.size() == std::size_t(senders * per_sender));
  for (int source = 1; source <= senders; ++source)
    for (int i = 0; i < per_sender; ++i) CHECK(seen.count(source * 1000 + i) == 1);

  // The 150 plain tensors from three threads on rank 1: each exactly once, each thread's in its order.
  std::map<int, int> last_per_thread;
  std::set<int> plain;
  for (int i = 0; i < 150; ++i) {
    const int v = static_cast<int>(world.at(2).receive(1).data()[0]);
    CHECK(plain.insert(v).second);
    auto it = last_per_thread.find(v / 1000);
    if (it != last_per_thread.end()) CHECK(v > it->second);
    last_per_thread[v / 1000] = v;
  }
  CHECK(plain.size() == 150);
}

// ---- barrier -------------------------------------------------------------------------------------------

TEST_CASE("barrier: no rank passes before every rank has arrived, over several rounds") {
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  constexpr int n = 4;
  constexpr int rounds = 3;
  local_world world{sys, n, test::scaled(5s)};

  std::atomic<int> arrived[rounds] = {};
  std::vector<std::vector<clock_type::time_point>> before(rounds, std::vector<clock_type::time_point>(n));
  std::vector<std::vector<clock_type::time_point>> after = before;
  std::atomic<int> early{0};

  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      for (int round = 0; round < rounds; ++round) {
        // A different straggler each round.
        std::this_thread::sleep_for(std::chrono::milliseconds(((r + round) % n) * 15));
        before[round][r] = clock_type::now();
        arrived[round].fetch_add(1);
        world.at(r).barrier();
        after[round][r] = clock_type::now();
        if (arrived[round].load() != n) early.fetch_add(1);
      }
    });
  for (auto& t : threads) t.join();

  CHECK(early.load() == 0);
  for (int round = 0; round < rounds; ++round) {
    const auto last_arrival = *std::max_element(before[round].begin(), before[round].end());
    const auto first_release = *std::min_element(after[round].begin(), after[round].end());
    CHECK(first_release >= last_arrival);
  }
}

TEST_CASE("barrier times out when one rank never arrives, then works again") {
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  local_world world{sys, 3, 200ms};

  std::atomic<int> timeouts{0};
  std::atomic<long long> slowest{0};
  std::vector<std::string> texts(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)  // rank 2 never arrives
    threads.emplace_back([&, r] {
      const auto start = clock_type::now();
      try {
        world.at(r).barrier();
      } catch (const timeout_error& e) {
        timeouts.fetch_add(1);
        texts[static_cast<std::size_t>(r)] = e.what();
      }
      const long long took = ms_since(start);
      long long seen = slowest.load();
      while (took > seen && !slowest.compare_exchange_weak(seen, took)) {}
    });
  for (auto& t : threads) t.join();
  CHECK(timeouts.load() == 2);
  CHECK(slowest.load() >= 150);
  // The barrier actor's own expiry, not the 1 s client-side fallback; a loaded machine may deliver even the
  // expiry late, so the bound scales (Note [test time scale]).
  CHECK(slowest.load() < 1000 * time_scale());
  CHECK(contains(texts[0], "rank 0"));
  CHECK(contains(texts[1], "rank 1"));

  // A failed round does not poison the next one.
  threads.clear();
  std::atomic<int> passed{0};
  for (int r = 0; r < 3; ++r)
    threads.emplace_back([&, r] {
      world.at(r).barrier();
      passed.fetch_add(1);
    });
  for (auto& t : threads) t.join();
  CHECK(passed.load() == 3);
}

TEST_CASE("barrier in a world of one rank returns at once") {
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  local_world world{sys, 1, test::scaled(200ms)};
  const auto start = clock_type::now();
  world.at(0).barrier();
  world.at(0).barrier();
  CHECK(ms_since(start) < 150 * time_scale());  // not the timeout's wait
}

// ---- shutdown ------------------------------------------------------------------------------------------

TEST_CASE("after shutdown every operation throws std::logic_error naming the rank, shutdown is idempotent") {
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  local_world world{sys, 3, 200ms};
  communicator& c = world.at(1);
  // Something is waiting for rank 1: shutdown must refuse to hand it out, not deliver it.
  world.at(0).send_forward(make_forward(0, 0, 0, 0, ramp({2}, 1.0f)), 1);

  c.shutdown();
  CHECK_NOTHROW(c.shutdown());

  std::vector<std::string> texts;
  texts.push_back(thrown_text<std::logic_error>([&] { c.send_forward(make_forward(0, 0, 0, 0, ramp({2}, 0.0f)), 0); }));
  texts.push_back(thrown_text<std::logic_error>([&] { c.send_backward(make_backward(0, 0, 0, 0, ramp({2}, 0.0f)), 0); }));
  texts.push_back(thrown_text<std::logic_error>([&] { c.send(ramp({2}, 0.0f), 2); }));
  texts.push_back(thrown_text<std::logic_error>([&] { c.receive_forward(0); }));
  texts.push_back(thrown_text<std::logic_error>([&] { c.receive_backward(2); }));
  texts.push_back(thrown_text<std::logic_error>([&] { c.receive(0); }));
  texts.push_back(thrown_text<std::logic_error>([&] { c.barrier(); }));
  // Even with an invalid rank, use after shutdown is what is reported.
  texts.push_back(thrown_text<std::logic_error>([&] { c.send(ramp({2}, 0.0f), 7); }));
  for (const auto& t : texts) {
    INFO(t);
    CHECK(contains(t, "rank 1"));
  }

  CHECK_NOTHROW(c.shutdown());
  CHECK_THROWS_AS(c.receive(0), std::logic_error);
  // The query functions still answer.
  CHECK(c.rank() == 1);
  CHECK(c.world_size() == 3);

  // Other ranks are unaffected, including sending to the shut-down rank.
  CHECK_NOTHROW(world.at(0).send(ramp({2}, 5.0f), 1));
  world.at(2).send(ramp({3}, 6.0f), 0);
  check_tensor(world.at(0).receive(2), ramp({3}, 6.0f), "after another rank's shutdown");
}

// ---- timeouts ------------------------------------------------------------------------------------------

TEST_CASE("receive times out within bounded time, and a tensor arriving later is not lost") {
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  local_world world{sys, 2, 200ms};

  auto timed_out = [](auto&& call, const char* label) {
    INFO(label);
    const auto start = clock_type::now();
    const std::string text = thrown_text<timeout_error>(call);
    const long long took = ms_since(start);
    CHECK(took >= 150);
    CHECK(took < 1000 * time_scale());  // the inbox's own expiry (scaled: Note [test time scale])
    CHECK(contains(text, "rank 1"));
  };
  timed_out([&] { world.at(1).receive_forward(0); }, "receive_forward");
  timed_out([&] { world.at(1).receive_backward(0); }, "receive_backward");
  timed_out([&] { world.at(1).receive(0); }, "receive");
  timed_out([&] { world.at(1).receive_forward(0); }, "receive_forward, twice");

  // Sent after the receives gave up: must be held for the next receive, not handed to a dead waiter.
  world.at(0).send_forward(make_forward(4, 11, 0, 0, ramp({2, 2}, 9.0f)), 1);
  world.at(0).send_backward(make_backward(4, 12, 0, 0, ramp({3}, 8.0f)), 1);
  world.at(0).send(ramp({1}, 7.0f), 1);
  forward_task f = world.at(1).receive_forward(0);
  CHECK(f.microbatch == 11);
  check_tensor(f.data, ramp({2, 2}, 9.0f), "forward after timeouts");
  backward_task b = world.at(1).receive_backward(0);
  CHECK(b.microbatch == 12);
  check_tensor(b.data, ramp({3}, 8.0f), "backward after timeouts");
  check_tensor(world.at(1).receive(0), ramp({1}, 7.0f), "plain after timeouts");

  // Each arrived exactly once: the inbox is empty again.
  timed_out([&] { world.at(1).receive_forward(0); }, "forward is consumed");
}

TEST_CASE("a tensor arriving while a receive is timing out goes to exactly one receive") {
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  local_world world{sys, 2, 100ms};
  // Sends land around the moment the receive expires; whichever wins, nothing is lost or doubled.
  int received = 0;
  for (int i = 0; i < 5; ++i) {
    std::thread sender([&, i] {
      std::this_thread::sleep_for(std::chrono::milliseconds(95 + i * 2));
      world.at(0).send(ramp({1}, float(i)), 1);
    });
    try {
      check_tensor(world.at(1).receive(0), ramp({1}, float(i)), "raced receive");
      ++received;
    } catch (const timeout_error&) {
      sender.join();
      // Sent, but on a loaded machine perhaps not in the inbox yet: receive again until it comes (a receive that
      // times out takes nothing), within a scaled bound (Note [test time scale]).
      const auto deadline = clock_type::now() + scaled(std::chrono::milliseconds(2000));
      for (;;) {
        try {
          check_tensor(world.at(1).receive(0), ramp({1}, float(i)), "receive after a raced timeout");
          break;
        } catch (const timeout_error&) {
          if (clock_type::now() > deadline) throw;
        }
      }
      ++received;
      continue;
    }
    sender.join();
  }
  CHECK(received == 5);
  CHECK_THROWS_AS(world.at(1).receive(0), timeout_error);
}

// ---- receive handles (Note [receive handles]) ----------------------------------------------------------

TEST_CASE("receive_async returns at once, ready() and wait_for() say when the tensor came, wait() takes it once") {
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  local_world world{sys, 2, test::scaled(5000ms)};
  const auto start = clock_type::now();
  receive_handle<tensor> h = world.at(1).receive_async(0);
  CHECK(ms_since(start) < 1000 * time_scale());
  CHECK(h.valid());
  CHECK_FALSE(h.ready());
  CHECK_FALSE(h.wait_for(50ms).has_value());  // nothing yet: the receive stays in flight
  world.at(0).send(ramp({2, 3}, 7.0f), 1);
  check_tensor(h.wait(), ramp({2, 3}, 7.0f), "async receive");
  CHECK_THROWS_AS(h.wait(), std::logic_error);  // one answer per handle
  CHECK_THROWS_AS(receive_handle<tensor>{}.wait(), std::logic_error);
  // Forward and backward handles keep their task fields; several handles in flight are answered in order.
  receive_handle<forward_task> f1 = world.at(1).receive_forward_async(0);
  receive_handle<forward_task> f2 = world.at(1).receive_forward_async(0);
  world.at(0).send_forward(make_forward(3, 1, 0, 8, ramp({2}, 1.0f)), 1);
  world.at(0).send_forward(make_forward(3, 2, 0, 16, ramp({2}, 2.0f)), 1);
  const forward_task a = f1.wait(), b = f2.wait();
  CHECK(a.microbatch == 1);
  CHECK(b.microbatch == 2);
  CHECK(a.source == 0);
  receive_handle<backward_task> g = world.at(0).receive_backward_async(1);
  world.at(1).send_backward(make_backward(3, 2, 0, 16, ramp({2}, 4.0f)), 0);
  const auto got = g.wait_for(test::scaled(5000ms));
  REQUIRE(got.has_value());
  CHECK(got->first_sample == 16);
}

TEST_CASE("an async receive times out like a blocking one, and a tensor arriving later waits for the next") {
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  local_world world{sys, 2, 100ms};
  receive_handle<tensor> h = world.at(1).receive_async(0);
  const std::string text = thrown_text<timeout_error>([&] { h.wait(); });
  CHECK(text.find("communicator of rank 1: no tensor from rank 0 within 100 ms") != std::string::npos);
  world.at(0).send(ramp({1}, 5.0f), 1);
  check_tensor(world.at(1).receive(0), ramp({1}, 5.0f), "after a timed-out async receive");
}

TEST_CASE("cancel() before the tensor is acknowledged and the tensor goes to the next receive, after it, wait() has it") {
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  local_world world{sys, 2, test::scaled(5000ms)};
  receive_handle<tensor> early = world.at(1).receive_async(0);
  CHECK(early.cancel());                               // nothing had come: withdrawn
  CHECK_THROWS_AS(early.wait(), std::logic_error);     // a withdrawn receive has no answer
  world.at(0).send(ramp({4}, 1.0f), 1);
  check_tensor(world.at(1).receive(0), ramp({4}, 1.0f), "the tensor a cancelled receive did not take");
  receive_handle<tensor> late = world.at(1).receive_async(0);
  world.at(0).send(ramp({4}, 2.0f), 1);
  const auto deadline = clock_type::now() + scaled(std::chrono::milliseconds(5000));
  while (!late.ready() && clock_type::now() < deadline) std::this_thread::sleep_for(1ms);
  REQUIRE(late.ready());
  CHECK_FALSE(late.cancel());  // answered already: not withdrawn
  check_tensor(late.wait(), ramp({4}, 2.0f), "the tensor of a receive cancelled too late");
}

TEST_CASE("a tensor raced against cancel() is received exactly once, never lost to a withdrawn receive") {
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  local_world world{sys, 2, test::scaled(5000ms)};
  // Most rounds race; every tenth lets the tensor arrive first (cancel() must fail and wait() have it), and the
  // one after it sends only after cancel() (which must withdraw the receive, leaving the tensor to the next):
  // both outcomes come at least once however the races fall.
  int by_handle = 0, by_next = 0;
  for (int i = 0; i < 200; ++i) {
    receive_handle<tensor> h = world.at(1).receive_async(0);
    std::atomic<bool> cancelled{false};
    std::thread sender([&, i] {
      if (i % 10 == 1)
        while (!cancelled) std::this_thread::yield();
      if (i % 3 == 1) std::this_thread::sleep_for(std::chrono::microseconds(50 * (i % 7)));
      world.at(0).send(ramp({1}, float(i)), 1);
    });
    if (i % 3 == 2) std::this_thread::sleep_for(std::chrono::microseconds(50 * (i % 5)));
    if (i % 10 == 0) {
      const auto deadline = clock_type::now() + scaled(std::chrono::milliseconds(5000));
      while (!h.ready() && clock_type::now() < deadline) std::this_thread::sleep_for(100us);
      CHECK(h.ready());
    }
    const bool withdrawn = h.cancel();
    cancelled = true;
    if (withdrawn) {
      ++by_next;
      check_tensor(world.at(1).receive(0), ramp({1}, float(i)), "raced tensor, taken by the next receive");
    } else {
      ++by_handle;
      check_tensor(h.wait(), ramp({1}, float(i)), "raced tensor, taken by the cancelled-too-late receive");
    }
    sender.join();
  }
  INFO("by the raced handle " << by_handle << ", by the next receive " << by_next);
  CHECK(by_handle >= 20);  // the rounds whose tensor came first, and any race it won
  CHECK(by_next >= 20);    // the rounds that sent after cancel(), and any race cancel() won
  receive_handle<tensor> rest = world.at(1).receive_async(0);  // nothing left over, nothing doubled
  CHECK_FALSE(rest.wait_for(100ms).has_value());
  CHECK(rest.cancel());
}

TEST_CASE("barrier_async: every rank's handle gives the same round, a withdrawn arrival does not count") {
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  local_world world{sys, 2, test::scaled(5000ms)};
  receive_handle<std::uint64_t> first = world.at(0).barrier_async();
  CHECK_FALSE(first.wait_for(50ms).has_value());  // rank 1 has not arrived
  CHECK(first.cancel());                          // withdrawn: rank 0 is no longer waiting there
  receive_handle<std::uint64_t> a = world.at(1).barrier_async();
  CHECK_FALSE(a.wait_for(50ms).has_value());      // the withdrawn arrival did not complete the round
  receive_handle<std::uint64_t> b = world.at(0).barrier_async();
  const std::uint64_t round_a = a.wait(), round_b = b.wait();
  CHECK(round_a == round_b);
  std::thread other([&] { world.at(1).barrier(); });  // and the blocking form still works on top
  CHECK_NOTHROW(world.at(0).barrier());
  other.join();
}

TEST_CASE("receives waiting at an inbox or barrier that exits fail at once, naming it") {
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  std::vector<caf::actor> endpoints{spawn_inbox(sys), spawn_inbox(sys)};
  caf::actor barrier = spawn_barrier(sys, 2, 60000ms);
  actor_communicator c{sys, 1, endpoints, barrier, 60000ms};
  receive_handle<forward_task> f = c.receive_forward_async(0);
  receive_handle<std::uint64_t> b = c.barrier_async();
  CHECK_FALSE(f.wait_for(100ms).has_value());  // both are waiting at their actors now
  CHECK_FALSE(b.wait_for(1ms).has_value());
  const auto start = clock_type::now();
  caf::anon_send_exit(endpoints[1], caf::exit_reason::user_shutdown);
  caf::anon_send_exit(barrier, caf::exit_reason::user_shutdown);
  const std::string ft = thrown_text<std::runtime_error>([&] { f.wait(); });
  const std::string bt = thrown_text<std::runtime_error>([&] { b.wait(); });
  CHECK(ms_since(start) < 1500 * time_scale());  // not the minute of the timeout
  CHECK(contains(ft, "communicator of rank 1: no forward tensor from rank 0: its inbox is gone"));
  CHECK(contains(bt, "communicator of rank 1: barrier not reached: its barrier is gone"));
  // A receive asked afterwards fails at once too.
  CHECK(contains(thrown_text<std::runtime_error>([&] { c.receive_backward_async(0).wait(); }), "its inbox is gone"));
  caf::anon_send_exit(endpoints[0], caf::exit_reason::user_shutdown);
}

TEST_CASE("a receive whose inbox is gone fails with an error instead of hanging") {
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  std::vector<caf::actor> endpoints{spawn_inbox(sys), spawn_inbox(sys)};
  caf::actor barrier = spawn_barrier(sys, 2, 200ms);
  actor_communicator c{sys, 1, endpoints, barrier, 200ms};
  CHECK(c.endpoint(0) == endpoints[0]);
  caf::anon_send_exit(endpoints[1], caf::exit_reason::user_shutdown);
  const auto start = clock_type::now();
  CHECK_THROWS_AS(c.receive(0), std::runtime_error);
  CHECK(ms_since(start) < 1500 * time_scale());
  caf::anon_send_exit(endpoints[0], caf::exit_reason::user_shutdown);
  caf::anon_send_exit(barrier, caf::exit_reason::user_shutdown);
}

// ---- invalid ranks -------------------------------------------------------------------------------------

TEST_CASE("invalid ranks throw std::out_of_range naming the rank") {
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  local_world world{sys, 3, 200ms};
  communicator& c = world.at(0);

  for (int bad : {-1, 3, 100}) {
    const std::string name = "rank " + std::to_string(bad);
    INFO(name);
    std::vector<std::string> texts;
    texts.push_back(thrown_text<std::out_of_range>([&] { c.send_forward(make_forward(0, 0, 0, 0, ramp({1}, 0.0f)), bad); }));
    texts.push_back(thrown_text<std::out_of_range>([&] { c.send_backward(make_backward(0, 0, 0, 0, ramp({1}, 0.0f)), bad); }));
    texts.push_back(thrown_text<std::out_of_range>([&] { c.send(ramp({1}, 0.0f), bad); }));
    texts.push_back(thrown_text<std::out_of_range>([&] { c.receive_forward(bad); }));
    texts.push_back(thrown_text<std::out_of_range>([&] { c.receive_backward(bad); }));
    texts.push_back(thrown_text<std::out_of_range>([&] { c.receive(bad); }));
    for (const auto& t : texts) {
      INFO(t);
      CHECK(contains(t, name));
    }
  }
  // The failed calls did not break the communicator.
  c.send(ramp({2}, 3.0f), 2);
  check_tensor(world.at(2).receive(0), ramp({2}, 3.0f), "after invalid ranks");

  // Constructing a communicator for a rank outside the world, or a world without ranks, fails too.
  std::vector<caf::actor> endpoints{spawn_inbox(sys), spawn_inbox(sys)};
  caf::actor barrier = spawn_barrier(sys, 2, 200ms);
  const std::string text = thrown_text<std::out_of_range>([&] { actor_communicator bad{sys, 2, endpoints, barrier}; });
  CHECK(contains(text, "rank 2"));
  CHECK_THROWS_AS(actor_communicator(sys, -1, endpoints, barrier), std::out_of_range);
  CHECK_THROWS_AS(local_world(sys, 0), std::invalid_argument);
  CHECK_THROWS_AS(world.at(3), std::out_of_range);
  for (auto& e : endpoints) caf::anon_send_exit(e, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(barrier, caf::exit_reason::user_shutdown);
}

// ---- multi-stage traffic -------------------------------------------------------------------------------

TEST_CASE("forward through four stages: 0 -> 1 -> 2 -> 3, each stage adds 1") {
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  constexpr int stages = 4;
  constexpr int microbatches = 20;
  local_world world{sys, stages, test::scaled(5s)};

  std::vector<forward_task> arrived;
  std::vector<std::thread> threads;
  threads.emplace_back([&] {
    for (int m = 0; m < microbatches; ++m) world.at(0).send_forward(make_forward(3, m, 0, m * 8, ramp({8, 4}, float(m))), 1);
  });
  for (int s = 1; s < stages; ++s)
    threads.emplace_back([&, s] {
      for (int m = 0; m < microbatches; ++m) {
        forward_task t = world.at(s).receive_forward(s - 1);
        t.data += 1.0f;
        t.chunk = s;
        if (s + 1 < stages)
          world.at(s).send_forward(std::move(t), s + 1);
        else
          arrived.push_back(std::move(t));
      }
    });
  for (auto& t : threads) t.join();

  REQUIRE(arrived.size() == std::size_t(microbatches));
  for (int m = 0; m < microbatches; ++m) {
    const forward_task& t = arrived[std::size_t(m)];
    CHECK(t.microbatch == m);
    CHECK(t.step == 3);
    CHECK(t.first_sample == m * 8);
    CHECK(t.source == stages - 2);
    check_tensor(t.data, ramp({8, 4}, float(m) + float(stages - 1)), "microbatch " + std::to_string(m));
  }
}

TEST_CASE("backward through four stages: 3 -> 2 -> 1 -> 0, each stage adds 1") {
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  constexpr int stages = 4;
  constexpr int microbatches = 20;
  local_world world{sys, stages, test::scaled(5s)};

  std::vector<backward_task> arrived;
  std::vector<std::thread> threads;
  threads.emplace_back([&] {
    for (int m = 0; m < microbatches; ++m)
      world.at(stages - 1).send_backward(make_backward(5, m, 0, m * 8, ramp({8, 4}, float(-m))), stages - 2);
  });
  for (int s = stages - 2; s >= 0; --s)
    threads.emplace_back([&, s] {
      for (int m = 0; m < microbatches; ++m) {
        backward_task t = world.at(s).receive_backward(s + 1);
        t.data += 1.0f;
        if (s > 0)
          world.at(s).send_backward(std::move(t), s - 1);
        else
          arrived.push_back(std::move(t));
      }
    });
  for (auto& t : threads) t.join();

  REQUIRE(arrived.size() == std::size_t(microbatches));
  for (int m = 0; m < microbatches; ++m) {
    const backward_task& t = arrived[std::size_t(m)];
    CHECK(t.microbatch == m);
    CHECK(t.step == 5);
    CHECK(t.first_sample == m * 8);
    CHECK(t.source == 1);
    check_tensor(t.data, ramp({8, 4}, float(-m) + float(stages - 1)), "microbatch " + std::to_string(m));
  }
}

TEST_CASE("interleaved forward and backward traffic on the same ranks (1F1B order)") {
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  constexpr int stages = 4;
  constexpr int microbatches = 12;
  local_world world{sys, stages, test::scaled(5s)};

  // Forward adds 1 per stage; the last stage turns its output into the gradient; backward adds 100 per
  // stage. So stage 0 must get back input + stages + 100 * stages for every microbatch.
  std::vector<backward_task> results;
  std::atomic<int> out_of_order{0};  // no REQUIRE inside threads: a throw there would terminate
  std::vector<std::thread> threads;
  for (int s = 0; s < stages; ++s)
    threads.emplace_back([&, s] {
      communicator& c = world.at(s);
      std::map<int, tensor> stash;  // the last stage's outputs, by microbatch
      auto forward = [&](int m) {
        forward_task t = s == 0 ? make_forward(1, m, 0, m, ramp({3, 2}, float(m) * 10.0f)) : c.receive_forward(s - 1);
        if (t.microbatch != m) out_of_order.fetch_add(1);
        t.data += 1.0f;
        if (s + 1 < stages)
          c.send_forward(std::move(t), s + 1);
        else
          stash[m] = std::move(t.data);
      };
      auto backward = [&](int m) {
        backward_task g = s + 1 == stages ? make_backward(1, m, 0, m, std::move(stash.at(m))) : c.receive_backward(s + 1);
        if (g.microbatch != m) out_of_order.fetch_add(1);
        g.data += 100.0f;
        if (s > 0)
          c.send_backward(std::move(g), s - 1);
        else
          results.push_back(std::move(g));
      };
      const int warmup = std::min(stages - 1 - s, microbatches);
      int f = 0, b = 0;
      for (; f < warmup; ++f) forward(f);
      while (f < microbatches) {
        forward(f++);
        backward(b++);
      }
      while (b < microbatches) backward(b++);
    });
  for (auto& t : threads) t.join();

  CHECK(out_of_order.load() == 0);
  REQUIRE(results.size() == std::size_t(microbatches));
  for (int m = 0; m < microbatches; ++m) {
    const backward_task& g = results[std::size_t(m)];
    CHECK(g.microbatch == m);
    CHECK(g.source == 1);
    check_tensor(g.data, ramp({3, 2}, float(m) * 10.0f + float(stages) + 100.0f * float(stages)),
                 "microbatch " + std::to_string(m));
  }
}

// ---- edge cases ----------------------------------------------------------------------------------------

TEST_CASE("sending to oneself works for every kind") {
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  local_world world{sys, 2, test::scaled(1s)};
  for (int r = 0; r < 2; ++r) {
    communicator& c = world.at(r);
    c.send_forward(make_forward(1, 2, 3, 4, ramp({2, 3}, 1.0f)), r);
    c.send_backward(make_backward(5, 6, 7, 8, ramp({3, 2}, 2.0f)), r);
    c.send(ramp({4}, 3.0f), r);
    forward_task f = c.receive_forward(r);
    CHECK(f.source == r);
    CHECK(f.microbatch == 2);
    CHECK(f.chunk == 3);
    check_tensor(f.data, ramp({2, 3}, 1.0f), "forward to self");
    backward_task b = c.receive_backward(r);
    CHECK(b.source == r);
    CHECK(b.chunk == 7);
    check_tensor(b.data, ramp({3, 2}, 2.0f), "backward to self");
    check_tensor(c.receive(r), ramp({4}, 3.0f), "plain to self");
  }
  // A world of one rank talks only to itself.
  local_world alone{sys, 1, test::scaled(1s)};
  alone.at(0).send(ramp({2}, 9.0f), 0);
  check_tensor(alone.at(0).receive(0), ramp({2}, 9.0f), "world of one");
}

TEST_CASE("a 256 MB tensor arrives intact and without a copy") {
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  local_world world{sys, 2, test::scaled(10s)};
  constexpr std::size_t n = std::size_t(64) << 20;  // 64M floats = 256 MiB

  tensor big = tensor::from_shape({n / 1024, 1024});
  for (std::size_t i = 0; i < n; ++i) big.data()[i] = static_cast<float>(i % 1000003);
  const float* sent_pointer = big.data();
  auto check_samples = [&](const tensor& t, const char* label) {
    INFO(label);
    REQUIRE(t.size() == n);
    REQUIRE(shape_string(t) == shape_string(shape_t{n / 1024, 1024}));
    for (std::size_t i : {std::size_t(0), std::size_t(1), std::size_t(1000003), std::size_t(12345678), n / 2, n - 2,
                          n - 1})
      CHECK(t.data()[i] == static_cast<float>(i % 1000003));
  };

  // Plain send/receive.
  auto start = clock_type::now();
  world.at(0).send(std::move(big), 1);
  tensor got = world.at(1).receive(0);
  const long long plain_us = std::chrono::duration_cast<std::chrono::microseconds>(clock_type::now() - start).count();
  check_samples(got, "plain");
  CHECK(got.data() == sent_pointer);

  // On through forward and backward tasks: still the same buffer.
  start = clock_type::now();
  world.at(1).send_forward(make_forward(0, 0, 0, 0, std::move(got)), 0);
  forward_task f = world.at(0).receive_forward(1);
  world.at(0).send_backward(make_backward(0, 0, 0, 0, std::move(f.data)), 1);
  backward_task b = world.at(1).receive_backward(0);
  const long long task_us = std::chrono::duration_cast<std::chrono::microseconds>(clock_type::now() - start).count();
  check_samples(b.data, "forward then backward");
  CHECK(b.data.data() == sent_pointer);

  MESSAGE("256 MiB: send+receive " << plain_us << " us; forward+backward round trip " << task_us << " us");
  CHECK(plain_us < 1000000 * time_scale());  // a copy would not fail this, the pointer check does; this catches a hang
}

// ---- serialisation -------------------------------------------------------------------------------------

namespace {

template <class Task>
std::vector<char> serialise(caf::actor_system& sys, Task task) {
  std::vector<char> buffer;
  caf::binary_serializer sink{sys, buffer};
  auto err = sink(task);
  REQUIRE_MESSAGE(!err, caf::to_string(err));
  return buffer;
}

template <class Task>
Task deserialise(caf::actor_system& sys, const std::vector<char>& buffer) {
  Task task;
  caf::binary_deserializer source{sys, buffer};
  auto err = source(task);
  REQUIRE_MESSAGE(!err, caf::to_string(err));
  return task;
}

template <class Task>
void check_fields(const Task& got, const Task& expected) {
  CHECK(got.step == expected.step);
  CHECK(got.microbatch == expected.microbatch);
  CHECK(got.chunk == expected.chunk);
  CHECK(got.source == expected.source);
  CHECK(got.first_sample == expected.first_sample);
  check_tensor(got.data, expected.data, "round trip");
}

// The payload must be the tensor's memory image (one raw block), which element-wise serialisation
// (CAF packs each float into a big-endian integer) is not.
void check_raw_payload(const std::vector<char>& buffer, const tensor& t) {
  const std::size_t bytes = t.size() * sizeof(float);
  REQUIRE(buffer.size() >= bytes);
  CHECK(buffer.size() <= bytes + 96);  // five ints, the shape, a length: a small header
  if (bytes > 0) CHECK(std::memcmp(buffer.data() + (buffer.size() - bytes), t.data(), bytes) == 0);
}

}  // namespace

TEST_CASE("forward_task and backward_task survive a binary serialisation round trip as one raw block") {
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};

  SUBCASE("3-d tensor in a forward_task") {
    forward_task t = make_forward(11, 22, 3, 440, ramp({4, 8, 32}, -7.0f));
    t.source = 2;
    t.data.data()[5] = -0.0f;
    t.data.data()[6] = 1e-40f;  // a denormal
    const auto buffer = serialise(sys, t);
    check_raw_payload(buffer, t.data);
    forward_task got = deserialise<forward_task>(sys, buffer);
    check_fields(got, t);
    CHECK(std::signbit(got.data.data()[5]));
  }
  SUBCASE("a forward_task with its labels, for a last stage that computes the loss") {
    forward_task t = make_forward(11, 22, 3, 440, ramp({4, 8, 32}, -7.0f));
    t.labels = ramp({4, 8}, 1.0f);
    t.batch_rows = 96;
    const auto buffer = serialise(sys, t);
    CHECK(std::memcmp(buffer.data() + (buffer.size() - t.data.byte_size()), t.data.data(), t.data.byte_size()) == 0);
    forward_task got = deserialise<forward_task>(sys, buffer);
    check_fields(got, t);
    check_tensor(got.labels, t.labels, "labels");
    CHECK(got.batch_rows == 96);
  }
  SUBCASE("3-d tensor in a backward_task") {
    backward_task t = make_backward(1, 2, 0, 64, ramp({2, 3, 5}, 0.5f));
    t.source = 4;
    const auto buffer = serialise(sys, t);
    check_raw_payload(buffer, t.data);
    check_fields(deserialise<backward_task>(sys, buffer), t);
  }
  SUBCASE("0-d tensor (one element, no axes)") {
    forward_task t = make_forward(1, 0, 0, 0, tensor::from_shape(shape_t{}));
    t.data() = 3.25f;
    t.source = 1;
    const auto buffer = serialise(sys, t);
    check_raw_payload(buffer, t.data);
    forward_task got = deserialise<forward_task>(sys, buffer);
    CHECK(got.data.dimension() == 0);
    check_fields(got, t);
  }
  SUBCASE("empty tensor (a zero-length axis)") {
    backward_task t = make_backward(9, 8, 7, 6, tensor::from_shape({0, 5}));
    t.source = 0;
    const auto buffer = serialise(sys, t);
    check_raw_payload(buffer, t.data);
    backward_task got = deserialise<backward_task>(sys, buffer);
    CHECK(got.data.size() == 0);
    check_fields(got, t);
  }
  SUBCASE("a truncated buffer is an error, not a crash") {
    const auto buffer = serialise(sys, make_forward(1, 2, 3, 4, ramp({16, 16}, 1.0f)));
    std::vector<char> cut(buffer.begin(), buffer.end() - 100);
    forward_task task;
    caf::binary_deserializer source{sys, cut};
    CHECK(source(task));
  }
}

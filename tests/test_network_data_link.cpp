// Data links (network/data_link.hpp, Note [data links]): real sockets on loopback, real mutual TLS with
// certificates made at run time. Bytes arrive whole and in order; a stray connection is dropped and named while
// the right one is taken; a peer of another CA gets nowhere; every wait ends: on its timeout, on its stop
// reason, or when the peer hangs up.
#include <doctest/doctest.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "network/data_link.hpp"
#include "network/tls_session.hpp"
#include "node_process.hpp"  // test certificates

using namespace ap;
using namespace std::chrono_literals;

namespace {

using clock_type = std::chrono::steady_clock;

std::shared_ptr<tls_context> tls_of(const std::string& name, const std::string& cluster = "main") {
  return std::make_shared<tls_context>(test::tls_security(name, cluster), "test");
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// A connected pair over `listener`: the accepted end and the connecting end.
struct link_pair {
  std::unique_ptr<data_link> accepted, connected;
};

link_pair connect_pair(link_listener& listener, const std::shared_ptr<tls_context>& client_tls, const std::string& hello = "hello") {
  link_pair p;
  std::vector<std::string> dropped;
  std::thread acceptor([&] { p.accepted = listener.accept(hello, clock_type::now() + test::scaled(10s), dropped); });
  p.connected = connect_link("127.0.0.1", listener.port(), client_tls, hello, clock_type::now() + test::scaled(10s));
  acceptor.join();
  return p;
}

std::vector<float> pattern(std::size_t n) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<float>(i % 9973) * 0.5f;
  return v;
}

}  // namespace

TEST_CASE("a data link carries 12 MB whole and in order, plain TCP and mutual TLS") {
  for (bool tls : {false, true}) {
    CAPTURE(tls);
    auto context = tls ? tls_of("node") : nullptr;
    link_listener listener("127.0.0.1", context);
    auto p = connect_pair(listener, tls ? tls_of("coordinator") : nullptr);
    const auto sent = pattern(3 << 20);  // larger than any socket buffer: the reader must drain as the writer goes
    std::vector<float> got(sent.size());
    std::thread writer([&] { p.connected->write(sent.data(), sent.size() * sizeof(float), test::scaled(10s), nullptr); });
    p.accepted->read(got.data(), got.size() * sizeof(float), test::scaled(10s), nullptr);
    writer.join();
    CHECK(std::memcmp(got.data(), sent.data(), sent.size() * sizeof(float)) == 0);
  }
}

TEST_CASE("write_now takes what a plain socket takes at once and write() the rest from there, a TLS link takes nothing") {
  // Note [writes without waiting].
  for (bool tls : {false, true}) {
    CAPTURE(tls);
    auto context = tls ? tls_of("node") : nullptr;
    link_listener listener("127.0.0.1", context);
    auto p = connect_pair(listener, tls ? tls_of("coordinator") : nullptr);
    const std::uint64_t head = 0x0123456789abcdefull;
    const auto body = pattern(3 << 20);  // 12 MB: more than the socket takes while nobody reads
    const data_link::piece pieces[] = {{&head, sizeof head}, {body.data(), body.size() * sizeof(float)}};
    const std::size_t total = sizeof head + body.size() * sizeof(float);
    const std::size_t taken = p.connected->write_now(pieces, 2);
    if (tls) {
      CHECK(taken == 0);
    } else {
      CHECK(taken > sizeof head);  // the header and some of the floats, in one call
      CHECK(taken < total);
    }
    std::uint64_t got_head = 0;
    std::vector<float> got(body.size());
    std::thread writer([&] {  // the rest, from where write_now stopped
      if (taken < sizeof head)
        p.connected->write(reinterpret_cast<const char*>(&head) + taken, sizeof head - taken, test::scaled(10s), nullptr);
      const std::size_t done = taken > sizeof head ? taken - sizeof head : 0;
      p.connected->write(reinterpret_cast<const char*>(body.data()) + done, body.size() * sizeof(float) - done, test::scaled(10s), nullptr);
    });
    p.accepted->read(&got_head, sizeof got_head, test::scaled(10s), nullptr);
    p.accepted->read(got.data(), got.size() * sizeof(float), test::scaled(10s), nullptr);
    writer.join();
    CHECK(got_head == head);
    CHECK(std::memcmp(got.data(), body.data(), body.size() * sizeof(float)) == 0);
  }
}

TEST_CASE("a listener drops a connection with the wrong hello, naming it, and takes the right one") {
  link_listener listener("127.0.0.1", nullptr);
  std::vector<std::string> dropped;
  std::unique_ptr<data_link> accepted;
  std::thread acceptor([&] { accepted = listener.accept("rank 0 to rank 1", clock_type::now() + test::scaled(10s), dropped); });
  auto stray = connect_link("127.0.0.1", listener.port(), nullptr, "rank 2 to rank 1", clock_type::now() + test::scaled(10s));
  auto right = connect_link("127.0.0.1", listener.port(), nullptr, "rank 0 to rank 1", clock_type::now() + test::scaled(10s));
  acceptor.join();
  REQUIRE(accepted);
  REQUIRE(dropped.size() == 1);
  CHECK(contains(dropped[0], "a connection from 127.0.0.1:"));
  CHECK(contains(dropped[0], "said 'rank 2 to rank 1', not 'rank 0 to rank 1'"));
  const std::uint32_t word = 0xfeedbeef;
  right->write(&word, sizeof word, test::scaled(5s), nullptr);
  std::uint32_t got = 0;
  accepted->read(&got, sizeof got, test::scaled(5s), nullptr);
  CHECK(got == word);
}

TEST_CASE("a peer whose certificate another CA signed, or that speaks plain TCP, cannot open a TLS link") {
  link_listener listener("127.0.0.1", tls_of("node"));
  for (bool plain : {false, true}) {
    CAPTURE(plain);
    std::vector<std::string> dropped;
    std::string accept_error;
    std::thread acceptor([&] {
      try {
        listener.accept("hello", clock_type::now() + test::scaled(1500ms), dropped);
      } catch (const link_error& e) {
        accept_error = e.what();
      }
    });
    std::string connect_error;
    try {
      // Plain: the hello goes out unencrypted and the listener's handshake fails on it.
      auto link = connect_link("127.0.0.1", listener.port(), plain ? nullptr : tls_of("node", "other CA"), "hello",
                               clock_type::now() + test::scaled(1500ms));
      char byte = 0;
      link->read(&byte, 1, test::scaled(1500ms), nullptr);  // the listener hangs up on it
    } catch (const link_error& e) {
      connect_error = e.what();
    }
    acceptor.join();
    CHECK(accept_error == "nobody connected");
    REQUIRE(!dropped.empty());
    CHECK(contains(dropped[0], "a connection from 127.0.0.1:"));
    CHECK(contains(dropped[0], "TLS handshake"));
    CHECK(!connect_error.empty());
    if (!plain) CHECK(contains(connect_error, "127.0.0.1:" + std::to_string(listener.port()) + ": TLS handshake"));
  }
}

TEST_CASE("a link's waits end: on the timeout, on a stop reason, when the peer hangs up") {
  for (bool tls : {false, true}) {
    CAPTURE(tls);
    link_listener listener("127.0.0.1", tls ? tls_of("node") : nullptr);
    auto p = connect_pair(listener, tls ? tls_of("coordinator") : nullptr);
    char buf[64];
    auto started = clock_type::now();
    try {
      p.accepted->read(buf, sizeof buf, 200ms, nullptr);
      FAIL("read bytes nobody sent");
    } catch (const link_error& e) {
      CHECK(e.reason == link_error::kind::timed_out);
      CHECK(std::string(e.what()) == "no byte came for 200 ms");
    }
    CHECK(clock_type::now() - started >= 200ms);
    try {
      p.accepted->read(buf, sizeof buf, 10s, [] { return std::string("rank 2 aborted the group"); });
      FAIL("read bytes nobody sent");
    } catch (const link_error& e) {
      CHECK(e.reason == link_error::kind::stopped);
      CHECK(std::string(e.what()) == "rank 2 aborted the group");
    }
    // The writer half-sends, then goes: the reader learns it at once, not after its 10 s.
    std::thread goes([&] {
      p.connected->write("abc", 3, test::scaled(5s), nullptr);
      std::this_thread::sleep_for(100ms);
      p.connected.reset();
    });
    started = clock_type::now();
    try {
      p.accepted->read(buf, sizeof buf, 10s, nullptr);
      FAIL("read 64 bytes of 3");
    } catch (const link_error& e) {
      CHECK(e.reason == link_error::kind::closed);
      CHECK(contains(e.what(), "the peer hung up"));
    }
    goes.join();
    CHECK(clock_type::now() - started < test::scaled(5s));
    // Writing to a peer that went: closed too (no SIGPIPE ends the process).
    const auto big = pattern(1 << 20);
    std::unique_ptr<data_link> reader = std::move(p.accepted);
    auto q = connect_pair(listener, tls ? tls_of("coordinator") : nullptr);
    q.accepted.reset();
    try {
      for (int i = 0; i < 8; ++i) q.connected->write(big.data(), big.size() * sizeof(float), 5s, nullptr);
      FAIL("wrote 32 MB to nobody");
    } catch (const link_error& e) {
      CHECK(e.reason == link_error::kind::closed);
    }
  }
}

TEST_CASE("connect_link names the address it cannot reach within its deadline") {
  std::uint16_t port = 0;
  {
    link_listener gone("127.0.0.1", nullptr);
    port = gone.port();
  }
  const auto started = clock_type::now();
  try {
    connect_link("127.0.0.1", port, nullptr, "hello", clock_type::now() + 300ms);
    FAIL("connected to nobody");
  } catch (const link_error& e) {
    CHECK(e.reason == link_error::kind::timed_out);
    CHECK(std::string(e.what()) == "cannot reach 127.0.0.1:" + std::to_string(port) + ": Connection refused");
  }
  CHECK(clock_type::now() - started < test::scaled(5s));
}

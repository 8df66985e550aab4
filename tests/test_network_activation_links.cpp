// Activation links (network/activation_links.hpp, Note [activations on data links]): real sockets on loopback,
// real mutual TLS. Tensors of every dtype and shape arrive whole under their tickets, in any order they are
// taken; a ticket never sent, or of an aborted step, ends in a clear error within the timeout, and at once when
// its sender's link ended; a stray connection
// is dropped and named; a sender to an address where nobody listens gets an error naming it; a link that dies
// is reconnected by the next tensor.
#include <doctest/doctest.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <string>

#include "network/activation_links.hpp"
#include "network/tls_session.hpp"
#include "node_process.hpp"  // test certificates
#include "test_support.hpp"

using namespace ap;
using namespace std::chrono_literals;

namespace {

std::shared_ptr<tls_context> tls_of(const std::string& name) {
  return std::make_shared<tls_context>(test::tls_security(name), "test");
}

tensor counting(const shape_t& shape, float scale) {
  tensor t = tensor::from_shape(shape);
  float* p = t.data();
  for (std::size_t i = 0; i < t.size(); ++i) p[i] = static_cast<float>(i % 10007) * scale;
  return t;
}

bool same_bits(const tensor& a, const tensor& b) {
  return a.type() == b.type() && a.shape() == b.shape() && std::memcmp(a.bytes(), b.bytes(), a.byte_size()) == 0;
}

void round_trip(const std::shared_ptr<tls_context>& receiver_tls, const std::shared_ptr<tls_context>& sender_tls) {
  activation_inbox inbox(1, "127.0.0.1", receiver_tls, 10s);
  activation_outbox outbox(0, sender_tls, 10s);
  const std::string address = "127.0.0.1:" + std::to_string(inbox.port());
  const tensor big = counting({256, 1024}, 0.25f);  // 1 MB
  const tensor cube = counting({2, 3, 4}, -1.5f);
  tensor half = tensor::from_shape({256, 1024}, dtype::bfloat16);
  to_bfloat16(big.data(), half.bf16_data(), big.size());
  const std::uint64_t a = outbox.next_ticket(), b = outbox.next_ticket(), c = outbox.next_ticket();
  CHECK(a != b);
  CHECK((a >> 48) == 1);  // stage 0's, plus one
  outbox.send(1, address, a, 7, big);
  outbox.send(1, address, b, 7, cube);
  outbox.send(1, address, c, 7, half);
  CHECK(same_bits(inbox.take(c), half));  // taken in any order
  CHECK(same_bits(inbox.take(a), big));
  CHECK(same_bits(inbox.take(b), cube));
}

}  // namespace

TEST_CASE("activation links carry every dtype and shape whole, taken by ticket in any order: plain TCP and mutual TLS") {
  SUBCASE("plain TCP") { round_trip(nullptr, nullptr); }
  SUBCASE("mutual TLS") { round_trip(tls_of("node"), tls_of("coordinator")); }
}

TEST_CASE("a tensor that never comes, or of an aborted step, is a clear error within the timeout") {
  {
    activation_inbox quick(3, "127.0.0.1", nullptr, 300ms);
    const auto t0 = std::chrono::steady_clock::now();
    const std::string missing = test::error_of([&] { quick.take((3ULL << 48) | 42); });
    CHECK(std::chrono::steady_clock::now() - t0 < test::scaled(5s));
    CHECK(test::contains(missing, "stage 3: the tensor of ticket 42 from stage 2 did not come on its data link within 300 ms"));
  }
  // Room for a slow machine (sanitizers): the tensors below must arrive within it.
  activation_inbox inbox(3, "127.0.0.1", nullptr, std::chrono::duration_cast<std::chrono::milliseconds>(test::scaled(1s)));
  activation_outbox outbox(2, nullptr, 5s);
  const std::string address = "127.0.0.1:" + std::to_string(inbox.port());
  const std::uint64_t old = outbox.next_ticket(), current = outbox.next_ticket();
  outbox.send(3, address, old, 4, counting({64, 512}, 1.0f));
  outbox.send(3, address, current, 5, counting({64, 512}, 2.0f));
  CHECK(inbox.take(current).shape() == shape_t{64, 512});  // both arrived: the later was read after the earlier
  inbox.forget_before(5);                                   // step 4 was aborted
  CHECK(test::contains(test::error_of([&] { inbox.take(old); }), "did not come on its data link"));
}

TEST_CASE("a tensor whose sender's link ended without it fails at once, not after the timeout") {
  activation_inbox inbox(1, "127.0.0.1", nullptr, test::scaled(30s));
  std::uint64_t next = 0;
  {
    activation_outbox outbox(0, nullptr, 5s);  // its process, gone when it goes
    const std::uint64_t sent = outbox.next_ticket();
    next = outbox.next_ticket();
    outbox.send(1, "127.0.0.1:" + std::to_string(inbox.port()), sent, 0, counting({16}, 1.0f));
    CHECK(inbox.take(sent).size() == 16);
  }
  const auto t0 = std::chrono::steady_clock::now();
  const std::string why = test::error_of([&] { inbox.take(next); });
  CHECK(std::chrono::steady_clock::now() - t0 < test::scaled(10s));
  CHECK(test::contains(why, "stage 1: the tensor of ticket 2 from stage 0 will not come: stage 0's link ended"));
}

TEST_CASE("a stray connection is dropped and named, a dead address is named, a broken link is opened again") {
  activation_inbox inbox(1, "127.0.0.1", nullptr, std::chrono::duration_cast<std::chrono::milliseconds>(test::scaled(1s)));
  const std::string address = "127.0.0.1:" + std::to_string(inbox.port());
  {  // says another stage's hello; its write may find the connection dropped already
    activation_outbox stray(0, nullptr, 5s);
    (void)test::error_of([&] { stray.send(2, address, stray.next_ticket(), 0, counting({4}, 1.0f)); });
  }
  const std::string why = test::error_of([&] { inbox.take(1); });
  CHECK(test::contains(why, "dropped a connection from 127.0.0.1:"));
  CHECK(test::contains(why, "that said 'actorpipe activations to stage 2', not 'actorpipe activations to stage 1'"));

  activation_outbox outbox(0, nullptr, 1s);
  const std::string nobody = "127.0.0.1:" + std::to_string(test::free_port());
  const std::string refused = test::error_of([&] { outbox.send(1, nobody, outbox.next_ticket(), 0, counting({4}, 1.0f)); });
  CHECK(test::contains(refused, "stage 0's data link to stage 1 at " + nobody + ": "));

  // The receiving stage went and came back at the same address: the next tensor opens a new link.
  std::uint16_t port = 0;
  {
    activation_inbox first(1, "127.0.0.1", nullptr, 5s);
    port = first.port();
    const std::uint64_t t = outbox.next_ticket();
    outbox.send(1, "127.0.0.1:" + std::to_string(port), t, 0, counting({8}, 1.0f));
    CHECK(first.take(t).size() == 8);
  }
  std::string failed;
  for (int i = 0; i < 3 && failed.empty(); ++i)  // the peer's close may take a write or two to show
    failed = test::error_of([&] { outbox.send(1, "127.0.0.1:" + std::to_string(port), outbox.next_ticket(), 0, counting({1 << 20}, 1.0f)); });
  CHECK(test::contains(failed, "stage 0's data link to stage 1"));
}

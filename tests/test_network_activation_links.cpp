// Activation links (network/activation_links.hpp, Note [activations on data links]): real sockets on loopback,
// real mutual TLS. Tensors of every dtype and shape arrive whole under their tickets, in any order they are
// taken; a ticket never sent, or of an aborted step, ends in a clear error within the timeout, and at once when
// its sender's link ended; a stray connection
// is dropped and named; a sender to an address where nobody listens gets an error naming it; a link that dies
// is reconnected by the next tensor. Between two ends of one address a tensor is copied from its sender's memory
// (Note [one copy on one machine]); an inbox that cannot, and an outbox refused, fall back to the link's bytes;
// after one copy an outbox lends its tensors without waiting (Note [offers without waiting]).
#include <doctest/doctest.h>

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "network/activation_links.hpp"
#include "network/link_echo.hpp"
#include "network/tls_session.hpp"
#include "memory_reads.hpp"
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

// The inbox on `host`: 127.0.0.1, where the link's two ends have one address and the tensors come straight from
// the sender's memory (Note [one copy on one machine]), or 127.0.0.2, where the sender's end is 127.0.0.1 and the
// bytes travel on the link.
void round_trip(const std::shared_ptr<tls_context>& receiver_tls, const std::shared_ptr<tls_context>& sender_tls,
                const std::string& host) {
  activation_inbox inbox(1, host, receiver_tls, test::scaled(10s));
  activation_outbox outbox(0, sender_tls, test::scaled(10s));
  const std::string address = host + ":" + std::to_string(inbox.port());
  const tensor big = counting({256, 1024}, 0.25f);  // 1 MB
  const tensor cube = counting({2, 3, 4}, -1.5f);
  tensor half = tensor::from_shape({256, 1024}, dtype::bfloat16);
  to_bfloat16(big.data(), half.bf16_data(), big.size());
  const std::uint64_t a = outbox.next_ticket(), b = outbox.next_ticket(), c = outbox.next_ticket();
  CHECK(a != b);
  CHECK((a >> 48) == 1);  // stage 0's, plus one
  outbox.send(1, address, a, 7, tensor(big));
  outbox.send(1, address, b, 7, tensor(cube));
  outbox.send(1, address, c, 7, tensor(half));
  CHECK(same_bits(inbox.take(c), half));  // taken in any order
  CHECK(same_bits(inbox.take(a), big));
  CHECK(same_bits(inbox.take(b), cube));
  CHECK(inbox.copied_from_senders() == (host == "127.0.0.1" && test::memory_reads_allowed() ? 3 : 0));
}

// The frame an outbox writes before a tensor's bytes (network/activation_links.cpp), written or read here by hand.
struct frame_head {
  std::uint64_t ticket = 0, step = 0;
  std::uint32_t dtype_code = 0, dimensions = 0, place = 0, unused = 0;
};

// An inbox by hand: the link an outbox opened to `listener`, given a memory token as an inbox gives one.
struct inbox_by_hand {
  std::unique_ptr<data_link> link;
  memory_token token = fresh_memory_token();
};
inbox_by_hand accept_by_hand(link_listener& listener) {
  inbox_by_hand in;
  std::vector<std::string> dropped;
  in.link = listener.accept(activation_hello(1), std::chrono::steady_clock::now() + test::scaled(10s), dropped);
  in.link->write(in.token.data(), in.token.size(), test::scaled(5s), nullptr);
  return in;
}

// A 2-d tensor's frame offered in its sender's memory, read by hand.
struct offered_frame {
  frame_head head;
  std::uint64_t extents[2] = {};
  process_region region;
};
offered_frame read_offer(data_link& link) {
  offered_frame f;
  link.read(&f.head, sizeof f.head, test::scaled(5s), nullptr);
  link.read(f.extents, sizeof f.extents, test::scaled(5s), nullptr);
  link.read(&f.region, sizeof f.region, test::scaled(5s), nullptr);
  return f;
}

}  // namespace

TEST_CASE("activation links carry every dtype and shape whole, taken by ticket in any order: plain TCP and mutual TLS") {
  for (const std::string host : {"127.0.0.1", "127.0.0.2"}) {
    CAPTURE(host);
    SUBCASE("plain TCP") { round_trip(nullptr, nullptr, host); }
    SUBCASE("mutual TLS") { round_trip(tls_of("node"), tls_of("coordinator"), host); }
  }
}

TEST_CASE("copy_from_process copies another region's bytes after its token, and names why it cannot") {
  if (!test::memory_reads_allowed()) return;  // nothing to copy with here (said once, above)
  const memory_token token = fresh_memory_token();
  CHECK(token != fresh_memory_token());
  std::vector<float> from(300000), to(300000, 0.0f);
  for (std::size_t i = 0; i < from.size(); ++i) from[i] = static_cast<float>(i) * 0.5f;
  process_region region{static_cast<std::uint64_t>(::getpid()), reinterpret_cast<std::uintptr_t>(token.data()),
                        reinterpret_cast<std::uintptr_t>(from.data())};
  CHECK(copy_from_process(region, token, to.data(), from.size() * sizeof(float)) == "");
  CHECK(to == from);
  memory_token other = token;
  other[3] ^= 1;
  const std::string not_the_sender = "process " + std::to_string(::getpid()) + " does not hold the token given to the sender: another process";
  CHECK(copy_from_process(region, other, to.data(), 16) == not_the_sender);
  process_region gone = region;
  gone.pid = 4194304 + 1;  // above any pid Linux hands out (pid_max is at most 2^22)
  CHECK(test::contains(copy_from_process(gone, token, to.data(), 16), "cannot read process 4194305's memory: No such process"));
  // 16 MB or more: two halves on two threads, each checking the token.
  std::vector<float> large(5000003), into(large.size(), 0.0f);
  for (std::size_t i = 0; i < large.size(); ++i) large[i] = static_cast<float>(i % 65521) - 7.0f;
  region.at = reinterpret_cast<std::uintptr_t>(large.data());
  CHECK(copy_from_process(region, token, into.data(), large.size() * sizeof(float)) == "");
  CHECK(into == large);
  CHECK(copy_from_process(region, other, into.data(), large.size() * sizeof(float)) == not_the_sender);
}

namespace {

// A sender by hand: a link to `inbox` on `host`, the token the inbox gives it, and one frame offering `t` at
// `region`; returns the inbox's answer, or throws when the inbox ends the link instead.
std::uint8_t offer_by_hand(data_link& link, const tensor& t, std::uint64_t ticket, const process_region& region) {
  const frame_head head{ticket, 0, static_cast<std::uint32_t>(t.type()), 2, 1, 0};
  const std::uint64_t extents[2] = {t.shape()[0], t.shape()[1]};
  link.write(&head, sizeof head, test::scaled(5s), nullptr);
  link.write(extents, sizeof extents, test::scaled(5s), nullptr);
  link.write(&region, sizeof region, test::scaled(5s), nullptr);
  std::uint8_t answer = 9;
  link.read(&answer, 1, test::scaled(5s), nullptr);
  return answer;
}

}  // namespace

TEST_CASE("an inbox that cannot read the sender's memory answers 0, takes the bytes from the link and says why") {
  for (bool wrong_token : {false, true}) {
    CAPTURE(wrong_token);
    std::vector<std::string> log;
    std::mutex log_mutex;
    activation_inbox inbox(1, "127.0.0.1", nullptr, test::scaled(10s), [&](const std::string& line) {
      std::lock_guard<std::mutex> lock(log_mutex);
      log.push_back(line);
    });
    auto link = connect_link("127.0.0.1", inbox.port(), nullptr, activation_hello(1), std::chrono::steady_clock::now() + test::scaled(10s));
    memory_token token{};
    link->read(token.data(), token.size(), test::scaled(5s), nullptr);  // the inbox's, as the link opens
    const tensor t = counting({128, 256}, 0.5f);
    if (wrong_token) token[0] ^= 1;  // not what the inbox gave: another process's memory, as far as it can tell
    process_region region{static_cast<std::uint64_t>(::getpid()), reinterpret_cast<std::uintptr_t>(token.data()),
                          reinterpret_cast<std::uintptr_t>(t.bytes())};
    if (!wrong_token) region.pid = 4194305;  // no such process
    const std::uint64_t ticket = (1ULL << 48) | 1;  // stage 0's first
    CHECK(offer_by_hand(*link, t, ticket, region) == 0);
    link->write(t.bytes(), t.byte_size(), test::scaled(5s), nullptr);
    CHECK(same_bits(inbox.take(ticket), t));
    CHECK(inbox.copied_from_senders() == 0);
    {
      std::lock_guard<std::mutex> lock(log_mutex);
      REQUIRE(log.size() >= 2);  // the link opened, then why the tensor came on it
      CHECK(test::contains(log.back(), "stage 1: tensors from stage 0 come on the link, not from its memory: "));
      CHECK(test::contains(log.back(), !test::memory_reads_allowed() ? "cannot read process"
                                       : wrong_token           ? "does not hold the token given to the sender"
                                                               : "No such process"));
    }
    // Refused once, the link may offer no more: the inbox ends it, and a tensor awaited from it fails at once.
    std::uint8_t answer = 9;
    const std::string ended = test::error_of([&] { answer = offer_by_hand(*link, t, ticket + 1, region); });
    CHECK(answer == 9);
    CHECK(test::contains(ended, "the peer hung up"));
    CHECK(test::contains(test::error_of([&] { inbox.take(ticket + 1); }),
                         "a tensor offered in the sender's memory after a refusal"));
  }
}

TEST_CASE("an inbox takes no offer on a link from another address: the link ends, naming it") {
  activation_inbox inbox(1, "127.0.0.2", nullptr, test::scaled(10s));  // the sender's end is 127.0.0.1
  auto link = connect_link("127.0.0.2", inbox.port(), nullptr, activation_hello(1), std::chrono::steady_clock::now() + test::scaled(10s));
  memory_token token{};
  link->read(token.data(), token.size(), test::scaled(5s), nullptr);
  const tensor t = counting({16, 16}, 1.0f);
  const process_region region{static_cast<std::uint64_t>(::getpid()), reinterpret_cast<std::uintptr_t>(token.data()),
                              reinterpret_cast<std::uintptr_t>(t.bytes())};
  const std::uint64_t ticket = (1ULL << 48) | 1;
  CHECK(test::contains(test::error_of([&] { offer_by_hand(*link, t, ticket, region); }), "the peer hung up"));
  CHECK(test::contains(test::error_of([&] { inbox.take(ticket); }), "a tensor offered in the memory of a process of another machine"));
  CHECK(inbox.copied_from_senders() == 0);
}

TEST_CASE("an outbox whose offer the inbox refuses writes the bytes on the link, and offers no more on it") {
  link_listener listener("127.0.0.1", nullptr);
  activation_outbox outbox(0, nullptr, test::scaled(10s));
  const std::string address = "127.0.0.1:" + std::to_string(listener.port());
  const tensor first = counting({64, 256}, 1.0f), second = counting({32, 256}, 2.0f);
  std::thread sender([&] {
    tensor lent = first;  // refused, so not kept: the test reads the copy it offered at its address
    outbox.send(1, address, outbox.next_ticket(), 0, std::move(lent));
    outbox.send(1, address, outbox.next_ticket(), 0, tensor(second));
  });
  const inbox_by_hand in = accept_by_hand(listener);
  const auto& link = in.link;
  const offered_frame offer = read_offer(*link);
  CHECK(offer.head.place == 1);  // one address at both ends: offered where it lies
  CHECK(offer.region.pid == static_cast<std::uint64_t>(::getpid()));
  if (test::memory_reads_allowed()) {  // the outbox keeps the token where it says, and the tensor where it says
    tensor probe = tensor::from_shape({64, 256});
    CHECK(copy_from_process(offer.region, in.token, probe.bytes(), probe.byte_size()) == "");
    CHECK(same_bits(probe, first));
  }
  const std::uint8_t refuse = 0;
  link->write(&refuse, 1, test::scaled(5s), nullptr);
  tensor got = tensor::from_shape({64, 256});
  link->read(got.bytes(), got.byte_size(), test::scaled(5s), nullptr);
  CHECK(same_bits(got, first));
  frame_head head;
  std::uint64_t extents[2] = {};
  link->read(&head, sizeof head, test::scaled(5s), nullptr);
  CHECK(head.place == 0);  // refused once: the bytes follow on the link
  link->read(extents, sizeof extents, test::scaled(5s), nullptr);
  tensor got2 = tensor::from_shape({32, 256});
  link->read(got2.bytes(), got2.byte_size(), test::scaled(5s), nullptr);
  CHECK(same_bits(got2, second));
  sender.join();
}

TEST_CASE("once its inbox has copied an offer, an outbox lends its tensors and goes on without waiting for answers") {
  if (!test::memory_reads_allowed()) return;  // no offer is ever copied here (said once, above)
  link_listener listener("127.0.0.1", nullptr);
  const std::string address = "127.0.0.1:" + std::to_string(listener.port());
  const tensor a = counting({64, 256}, 1.0f), b = counting({32, 256}, 2.0f), c = counting({16, 256}, 3.0f);
  auto outbox = std::make_unique<activation_outbox>(0, nullptr, test::scaled(10s));
  std::atomic<int> sent{0};
  std::thread sender([&] {
    for (const tensor* t : {&a, &b, &c}) {
      tensor mine = *t;  // gone when this loop turns: a lent tensor is the outbox's
      outbox->send(1, address, outbox->next_ticket(), 0, std::move(mine));
      ++sent;
    }
  });
  const inbox_by_hand in = accept_by_hand(listener);
  const auto& link = in.link;
  const auto next_offer = [&](const tensor& expected) {  // reads a frame and copies its tensor from the sender
    const offered_frame offer = read_offer(*link);
    CHECK(offer.head.place == 1);
    tensor got = tensor::from_shape({offer.extents[0], offer.extents[1]});
    CHECK(copy_from_process(offer.region, in.token, got.bytes(), got.byte_size()) == "");
    CHECK(same_bits(got, expected));
  };
  const std::uint8_t yes = 1;
  next_offer(a);
  CHECK(sent == 0);  // the first offer waits for its answer
  link->write(&yes, 1, test::scaled(5s), nullptr);
  next_offer(b);
  next_offer(c);
  sender.join();  // both sent without an answer: the copies above read tensors only the outbox still holds
  CHECK(sent == 3);
  link->write(&yes, 1, test::scaled(5s), nullptr);
  link->write(&yes, 1, test::scaled(5s), nullptr);
  const auto ending = std::chrono::steady_clock::now();
  outbox.reset();  // its answers are here: it ends at once
  CHECK(std::chrono::steady_clock::now() - ending < test::scaled(1s));
}

TEST_CASE("an outbox drops a link whose stage went, with the tensors it kept for it, at its next tensor anywhere") {
  if (!test::memory_reads_allowed()) return;
  link_listener listener("127.0.0.1", nullptr);
  activation_outbox outbox(0, nullptr, test::scaled(10s));
  std::thread receiver([&] {  // copies nothing: answers the first offer, then goes without answering the second
    const inbox_by_hand in = accept_by_hand(listener);
    for (int frame = 0; frame < 2; ++frame) {
      read_offer(*in.link);
      const std::uint8_t yes = 1;
      if (frame == 0) in.link->write(&yes, 1, test::scaled(5s), nullptr);
    }
  });
  const std::string gone = "127.0.0.1:" + std::to_string(listener.port());
  outbox.send(1, gone, outbox.next_ticket(), 0, counting({64, 256}, 1.0f));
  outbox.send(1, gone, outbox.next_ticket(), 0, counting({64, 256}, 2.0f));
  receiver.join();  // its end of the link is closed
  CHECK(outbox.lent() == 1);
  activation_inbox other(2, "127.0.0.1", nullptr, test::scaled(10s));
  const std::uint64_t ticket = outbox.next_ticket();
  outbox.send(2, "127.0.0.1:" + std::to_string(other.port()), ticket, 0, counting({64, 256}, 3.0f));
  CHECK(same_bits(other.take(ticket), counting({64, 256}, 3.0f)));
  CHECK(outbox.lent() == 0);  // the first link's kept tensor is gone with it; the new link's first offer was waited for
}

TEST_CASE("a copy that fails after one succeeded ends the link: the wait for that tensor fails at once, naming it") {
  if (!test::memory_reads_allowed()) return;
  activation_inbox inbox(1, "127.0.0.1", nullptr, test::scaled(10s));
  auto link = connect_link("127.0.0.1", inbox.port(), nullptr, activation_hello(1), std::chrono::steady_clock::now() + test::scaled(10s));
  memory_token token{};
  link->read(token.data(), token.size(), test::scaled(5s), nullptr);
  const tensor t = counting({128, 256}, 0.5f);
  process_region region{static_cast<std::uint64_t>(::getpid()), reinterpret_cast<std::uintptr_t>(token.data()),
                        reinterpret_cast<std::uintptr_t>(t.bytes())};
  const std::uint64_t ticket = (1ULL << 48) | 1;
  CHECK(offer_by_hand(*link, t, ticket, region) == 1);
  region.pid = 4194305;  // the sending process went
  CHECK(offer_by_hand(*link, t, ticket + 1, region) == 0);
  CHECK(same_bits(inbox.take(ticket), t));
  const auto asked = std::chrono::steady_clock::now();
  const std::string failed = test::error_of([&] { inbox.take(ticket + 1); });
  CHECK(std::chrono::steady_clock::now() - asked < test::scaled(5s));
  CHECK(test::contains(failed, "stage 1: the tensor of ticket 2 from stage 0 will not come: stage 0's link ended"));
  CHECK(test::contains(failed, "could not be copied from its memory after earlier ones were: cannot read process 4194305"));
}

// What --auto times the links with (Note [auto on nodes]).
TEST_CASE("a link echo sends each frame back, and copies a frame offered in this process's memory with its token") {
  for (const char* host : {"127.0.0.1", "127.0.0.2"}) {  // one address at both ends, or two
    CAPTURE(host);
    const std::uint16_t port = start_link_echo(host, nullptr, test::scaled(5s));
    auto link = connect_link(host, port, nullptr, link_echo_hello, std::chrono::steady_clock::now() + test::scaled(5s));
    memory_token token{};
    link->read(token.data(), token.size(), test::scaled(5s), nullptr);
    std::vector<char> frame(100000), back;
    for (std::size_t i = 0; i < frame.size(); ++i) frame[i] = static_cast<char>(i % 251);
    link_echo_round_trip(*link, frame, back, test::scaled(5s));
    CHECK(back == frame);
    const bool one_machine = std::string(host) == "127.0.0.1" && test::memory_reads_allowed();
    CHECK(link_echo_copy(*link, token, frame, test::scaled(5s)) == one_machine);
    memory_token wrong = token;
    wrong[5] ^= 1;
    CHECK_FALSE(link_echo_copy(*link, wrong, frame, test::scaled(5s)));
    link_echo_round_trip(*link, frame, back, test::scaled(5s));  // and it goes on echoing
    CHECK(back == frame);
  }
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
  activation_inbox inbox(3, "127.0.0.1", nullptr, test::scaled(1s));
  activation_outbox outbox(2, nullptr, test::scaled(5s));
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
    activation_outbox outbox(0, nullptr, test::scaled(5s));  // its process, gone when it goes
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
  activation_inbox inbox(1, "127.0.0.1", nullptr, test::scaled(1s));
  const std::string address = "127.0.0.1:" + std::to_string(inbox.port());
  {  // says another stage's hello; its write may find the connection dropped already
    activation_outbox stray(0, nullptr, test::scaled(5s));
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
    activation_inbox first(1, "127.0.0.1", nullptr, test::scaled(5s));
    port = first.port();
    const std::uint64_t t = outbox.next_ticket();
    outbox.send(1, "127.0.0.1:" + std::to_string(port), t, 0, counting({8}, 1.0f));
    CHECK(first.take(t).size() == 8);
  }
  std::string failed = "no exception";
  // The peer's close may take a write or two to show, and a tensor lent (Note [offers without waiting]) hears of
  // it at the next one.
  for (int i = 0; i < 3 && failed == "no exception"; ++i)
    failed = test::error_of([&] { outbox.send(1, "127.0.0.1:" + std::to_string(port), outbox.next_ticket(), 0, counting({1 << 20}, 1.0f)); });
  CHECK(test::contains(failed, "stage 0's data link to stage 1"));
  const std::uint64_t again = outbox.next_ticket();  // the next tensor opens a new link to the stage back there
  activation_inbox back(1, "127.0.0.1", nullptr, test::scaled(5s));
  outbox.send(1, "127.0.0.1:" + std::to_string(back.port()), again, 0, counting({8}, 1.0f));
  CHECK(back.take(again).size() == 8);
}

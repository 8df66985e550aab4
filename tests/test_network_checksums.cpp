// Checked records (network/checked_records.hpp, Note [checked records]): every byte on plain TCP, on a data link
// or under CAF's messages, travels in a record with a CRC32C. The records alone; CAF's stream policy over a socket
// pair; then real plain links on loopback through a relay that flips one bit on the way: the read fails naming
// the link, an activation's wait fails at once as a lost link's, and a pipeline whose connection to a node is
// corrupted mid-run recovers (--restart-on-failure) to exactly the uninterrupted run's parameters.
#include <doctest/doctest.h>

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "actors/pipeline.hpp"
#include "data/synthetic.hpp"
#include "equivalence.hpp"
#include "failure/crc32c.hpp"
#include "failure/error.hpp"
#include "network/activation_links.hpp"
#include "network/checked_records.hpp"
#include "network/data_link.hpp"
#include "node_process.hpp"
#include "pipeline_test_models.hpp"
#include "tamper_relay.hpp"
#include "test_support.hpp"

using namespace ap;
using namespace std::chrono_literals;

namespace {

using clock_type = std::chrono::steady_clock;
using bytes = std::vector<unsigned char>;

bytes pattern(std::size_t n, unsigned salt = 0) {
  bytes v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<unsigned char>((i * 131 + salt) % 251);
  return v;
}

// A connected socket pair for checked_stream, both ends non-blocking.
struct socket_pair {
  int a = -1, b = -1;
  socket_pair() {
    int fds[2];
    REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, fds) == 0);
    a = fds[0], b = fds[1];
  }
  ~socket_pair() {
    ::close(a);
    ::close(b);
  }
};

}  // namespace

TEST_CASE("a checked record's header: its length and the CRC32C of length and payload, a length out of range reads 0") {
  const bytes payload = pattern(1000);
  unsigned char header[checked_header_bytes];
  checked_record_header(payload.data(), payload.size(), header);
  CHECK(checked_record_length(header) == 1000);
  CHECK(header[0] == 0xe8);  // little-endian 1000
  CHECK(header[1] == 0x03);
  CHECK(checked_record_crc(header) == crc32c(payload.data(), payload.size(), checked_record_start(header)));
  unsigned char bad[checked_header_bytes];
  const bytes largest = pattern(checked_record_bytes);
  checked_record_header(largest.data(), largest.size(), bad);
  CHECK(checked_record_length(bad) == checked_record_bytes);
  bad[2] ^= 0x40;  // past the largest record
  CHECK(checked_record_length(bad) == 0);
  std::memset(bad, 0, 4);
  CHECK(checked_record_length(bad) == 0);
}

TEST_CASE("CAF's stream in checked records: bytes whole and in order through partial writes and reads of any size, a flipped bit fails the read") {
  const bytes sent = pattern(3 * checked_record_bytes + 12345);
  socket_pair s;
  checked_stream writer("writer"), reader("reader");
  bytes got(sent.size());
  std::size_t written = 0, read = 0;
  const std::size_t reads[] = {1, 31, 1000, checked_record_bytes, 7};  // sizes asked in turn, as CAF's thresholds
  bool failed = false;
  for (int i = 0; read < got.size() && !failed && i < 1000000; ++i) {
    if (written < sent.size()) {
      std::size_t n = 0;
      failed = writer.write_some(n, s.a, sent.data() + written, sent.size() - written) == checked_stream::rw_state::failure;
      written += n;
    }
    const std::size_t ask = std::min(reads[i % 5], got.size() - read);
    std::size_t n = 0;
    failed = failed || reader.read_some(n, s.b, got.data() + read, ask) == checked_stream::rw_state::failure;
    read += n;
    while (!failed && reader.must_read_more() && read < got.size()) {  // held bytes the socket no longer signals
      failed = reader.read_some(n, s.b, got.data() + read, std::min<std::size_t>(7, got.size() - read)) ==
               checked_stream::rw_state::failure;
      read += n;
    }
  }
  CHECK_FALSE(failed);
  CHECK(written == sent.size());
  CHECK(got == sent);

  // A bit of the second record's payload flipped on the wire.
  socket_pair t;
  checked_stream w2("writer"), r2("the peer 10.0.0.9:4242");
  std::size_t n = 0;
  REQUIRE(w2.write_some(n, t.a, sent.data(), 100000) == checked_stream::rw_state::success);
  REQUIRE(n == 100000);
  bytes wire(n + checked_header_bytes);
  REQUIRE(::recv(t.b, wire.data(), wire.size(), MSG_WAITALL) == static_cast<ssize_t>(wire.size()));
  wire[checked_header_bytes + 5000] ^= 0x01;
  REQUIRE(::send(t.a, wire.data(), wire.size(), 0) == static_cast<ssize_t>(wire.size()));
  bytes into(100000);
  std::size_t r = 0;
  CHECK(r2.read_some(r, t.b, into.data(), into.size()) == checked_stream::rw_state::failure);
  CHECK(r == 0);
  CHECK(test::contains(r2.failure(), "a record of 100000 bytes from the peer 10.0.0.9:4242 failed its checksum (CRC32C)"));
}

TEST_CASE("a plain data link: a bit flipped on the way (a record's length, its CRC, its payload) fails the read, naming the link") {
  const bytes sent = pattern(2 * checked_record_bytes + 999);
  const std::size_t hello = checked_header_bytes + 4 + 5;  // the hello's record: "hello" and its length
  for (const std::size_t at : {hello + 2, hello + 5, hello + checked_header_bytes + 70000,
                               hello + 2 * checked_header_bytes + checked_record_bytes + 3}) {
    CAPTURE(at);
    link_listener listener("127.0.0.1", nullptr);
    test::tamper_relay tamper("127.0.0.1", listener.port(), at);
    std::vector<std::string> dropped;
    std::unique_ptr<data_link> accepted;
    std::thread acceptor([&] { accepted = listener.accept("hello", clock_type::now() + 10s, dropped); });
    auto connected = connect_link("127.0.0.1", tamper.port(), nullptr, "hello", clock_type::now() + 10s);
    acceptor.join();
    REQUIRE(accepted);
    std::thread writer([&] {
      try {
        connected->write(sent.data(), sent.size(), 10s, nullptr);
      } catch (const link_error&) {  // the reader may hang up first
      }
    });
    bytes got(sent.size());
    std::string error;
    bool corrupted = false;
    try {
      accepted->read(got.data(), got.size(), 10s, nullptr);
    } catch (const link_error& e) {
      CHECK(e.reason == link_error::kind::failed);
      error = e.what();
      corrupted = e.corrupted;
    }
    accepted.reset();
    writer.join();
    CHECK(tamper.flipped());
    CHECK(corrupted);
    CHECK((test::contains(error, "failed its checksum (CRC32C): corrupted on the way") ||
           test::contains(error, "claims")));
    CHECK(test::contains(error, "from 127.0.0.1:"));  // the link's other end
  }
}

TEST_CASE("an activation whose bytes are corrupted on a plain link never reaches its stage: the wait fails at once as a lost link's") {
  // The inbox on 127.0.0.1 and the relay on 127.0.0.2: the sender's link has two addresses, so the bytes cross
  // the socket (no copy out of the sender's memory: Note [one copy on one machine]).
  activation_inbox inbox(1, "127.0.0.1", nullptr, test::scaled(60s));  // far past the bound checked below
  test::tamper_relay tamper("127.0.0.2", inbox.port(), 300000);  // inside the tensor's bytes
  activation_outbox outbox(0, nullptr, 20s);
  tensor t = test::random_tensor({256, 1024}, 5);  // 1 MB
  const std::uint64_t ticket = outbox.next_ticket();
  try {
    outbox.send(1, "127.0.0.2:" + std::to_string(tamper.port()), ticket, 3, tensor(t));
  } catch (const link_error&) {  // the inbox may hang up first
  }
  const auto t0 = clock_type::now();
  std::string why;
  error_code code = error_code::none;
  try {
    inbox.take(ticket);
  } catch (const std::exception& e) {
    why = e.what();
    code = code_of(e);
  }
  INFO(why);
  CHECK(tamper.flipped());
  CHECK(clock_type::now() - t0 < test::scaled(10s));  // not the inbox's timeout
  CHECK(code == error_code::lost_node);  // recovery replays the step (Note [recovery])
  CHECK(test::contains(why, "stage 1: the tensor of ticket 1 from stage 0 will not come: stage 0's link ended"));
  CHECK(test::contains(why, "failed its checksum (CRC32C)"));
}

TEST_CASE("a pipeline over plain TCP whose connection to a node is corrupted mid-run recovers to the uninterrupted run's parameters") {
  const std::string actorpipe = std::string(AP_BINARY_DIR) + "/cli/actorpipe";
  const dataset d = test::small_blobs(16);
  // Six layers, the middle one sleeping 15 ms forward and backward: a step lasts long enough to corrupt one mid-way.
  const auto slow_model = [] {
    sequential m;
    for (const std::string spec : {"linear:12:16", "tanh", "linear:16:16", "sleep:15:15", "relu", "linear:16:4"})
      m.add(make_layer(spec));
    m.initialize(3);
    return m;
  };
  test::node_process first(actorpipe, {"--insecure"});
  test::node_process second(actorpipe, {"--insecure"});
  test::tamper_relay tamper("127.0.0.1", static_cast<std::uint16_t>(second.port()));
  const std::string through = "127.0.0.1:" + std::to_string(tamper.port());
  std::mutex log_mutex;
  std::string log;
  pipeline_options o = test::pipeline_options_for(2, 4, "1f1b");
  o.optimizer.kind = "adam";
  o.optimizer.lr = 0.01f;
  o.security = test::insecure_transport();
  o.timeout = 20s;
  o.restart_on_failure = 1;
  o.restart_wait = 20s;
  o.snapshot_every = 3;
  o.log = [&](const std::string& line) {
    std::lock_guard<std::mutex> lock(log_mutex);
    log += line + "\n";
  };
  const int steps = 6;
  o.nodes = {first.address(), second.address()};
  std::vector<float> reference_losses;
  sequential reference;
  {
    pipeline uninterrupted(slow_model(), o);
    for (int s = 0; s < steps; ++s)
      reference_losses.push_back(uninterrupted.train_step(d.inputs, d.labels, static_cast<std::uint64_t>(s)));
    reference = uninterrupted.gather_model();
  }
  o.nodes = {first.address(), through};
  pipeline pipe(slow_model(), o);
  std::vector<float> losses;
  std::string failure;
  sequential recovered;
  try {
    for (int s = 0; s < steps; ++s) {
      if (s == 2) tamper.flip_next();  // the next byte the coordinator sends the second node
      losses.push_back(pipe.train_step(d.inputs, d.labels, static_cast<std::uint64_t>(s)));
    }
    recovered = pipe.gather_model();
  } catch (const std::exception& e) {
    failure = e.what();
  }
  INFO(log << "\nsecond node:\n" << second.process().stderr_text());
  REQUIRE_MESSAGE(failure.empty(), failure);
  CHECK(tamper.flipped());
  CHECK(pipe.restarts() == 1);
  CHECK(test::contains(log, "recovery 1 of 1: step "));
  CHECK(test::contains(second.process().stderr_text(), "failed its checksum (CRC32C)"));
  REQUIRE(losses.size() == reference_losses.size());
  for (int s = 0; s < steps; ++s) CHECK(losses[static_cast<std::size_t>(s)] == reference_losses[static_cast<std::size_t>(s)]);
  test::check_same_parameters(reference, recovered, 0.0f, "corrupted once, recovered");
}

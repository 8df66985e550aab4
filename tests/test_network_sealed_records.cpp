// Sealed records (network/sealed_records.hpp, Note [sealed records]): what a TLS data link's bytes travel in
// after its handshake. The records alone: each opens to what was sealed, and one altered, replayed, reordered,
// sent the other way or announcing a length out of range does not. Then real TLS links on loopback through a
// relay that watches or alters the bytes: the plaintext never crosses the wire, a flipped bit ends the link, and
// reads of any size get the bytes whole and in order.
#include <doctest/doctest.h>


#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "network/data_link.hpp"
#include "network/sealed_records.hpp"
#include "network/tls_session.hpp"
#include "node_process.hpp"  // test certificates
#include "tamper_relay.hpp"

using namespace ap;
using namespace std::chrono_literals;

namespace {

using clock_type = std::chrono::steady_clock;
using bytes = std::vector<unsigned char>;

record_secret secret_of(unsigned char seed) {
  record_secret s{};
  for (std::size_t i = 0; i < s.size(); ++i) s[i] = static_cast<unsigned char>(seed + 7 * i);
  return s;
}

bytes pattern(std::size_t n, unsigned salt = 0) {
  bytes v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<unsigned char>((i * 131 + salt) % 251);
  return v;
}

bytes sealed(record_sealer& sealer, const bytes& plain) {
  bytes out(plain.size() + record_overhead);
  sealer.seal(plain.data(), plain.size(), out.data());
  return out;
}

// Opens a record sealed by `sealed` above; false when its tag fails.
bool opens(record_opener& opener, const bytes& record, bytes* plain = nullptr) {
  const std::size_t n = record_opener::announced(record.data());
  REQUIRE(record.size() == n + record_overhead);
  bytes data(record.begin() + record_header_bytes, record.begin() + record_header_bytes + static_cast<std::ptrdiff_t>(n));
  const bool ok = opener.open(record.data(), data.data(), n, record.data() + record_header_bytes + n);
  if (plain) *plain = data;
  return ok;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

std::shared_ptr<tls_context> tls_of(const std::string& name) {
  return std::make_shared<tls_context>(test::tls_security(name), "test");
}

}  // namespace

TEST_CASE("a sealed record opens to what was sealed, at every size up to the largest, and is not the plaintext") {
  record_sealer sealer(secret_of(1));
  record_opener opener(secret_of(1));
  for (std::size_t n : {std::size_t{1}, std::size_t{15}, std::size_t{16}, std::size_t{1000}, max_record_bytes}) {
    CAPTURE(n);
    const bytes plain = pattern(n, static_cast<unsigned>(n));
    const bytes record = sealed(sealer, plain);
    CHECK(record_opener::announced(record.data()) == n);
    if (n >= 16)
      CHECK(std::search(record.begin(), record.end(), plain.begin(), plain.begin() + 16) == record.end());
    bytes got;
    CHECK(opens(opener, record, &got));
    CHECK(got == plain);
  }
}

TEST_CASE("a sealed record that was altered, replayed, reordered or sent the other way does not open") {
  const bytes plain = pattern(5000);
  SUBCASE("a bit of its ciphertext, its tag or its length flipped") {
    for (std::size_t at : {std::size_t{0}, std::size_t{2}, record_header_bytes + 17, 5000 + record_header_bytes + 3}) {
      CAPTURE(at);
      record_sealer sealer(secret_of(2));
      record_opener opener(secret_of(2));
      bytes record = sealed(sealer, plain);
      record[at] ^= 0x01;
      if (at < record_header_bytes) {  // a length within range: the record is cut where the reader thinks
        const std::size_t n = record_opener::announced(record.data());
        bytes data(record.begin() + record_header_bytes, record.begin() + record_header_bytes + static_cast<std::ptrdiff_t>(std::min(n, plain.size())));
        data.resize(n);
        CHECK_FALSE(opener.open(record.data(), data.data(), n, record.data() + record.size() - record_tag_bytes));
      } else {
        CHECK_FALSE(opens(opener, record));
      }
    }
  }
  SUBCASE("replayed: the same record a second time") {
    record_sealer sealer(secret_of(3));
    record_opener opener(secret_of(3));
    const bytes record = sealed(sealer, plain);
    CHECK(opens(opener, record));
    CHECK_FALSE(opens(opener, record));
  }
  SUBCASE("reordered: the second record before the first") {
    record_sealer sealer(secret_of(4));
    record_opener opener(secret_of(4));
    const bytes first = sealed(sealer, plain), second = sealed(sealer, pattern(5000, 9));
    CHECK_FALSE(opens(opener, second));
  }
  SUBCASE("the other direction's key (a record sent back to its sender)") {
    record_sealer sealer(secret_of(5));
    record_opener opener(secret_of(6));
    CHECK_FALSE(opens(opener, sealed(sealer, plain)));
  }
}

TEST_CASE("records go on opening across a key's epoch, 65,536 records") {
  record_sealer sealer(secret_of(7));
  record_opener opener(secret_of(7));
  const std::size_t count = (std::size_t{1} << 16) + 3;
  bytes plain(1), record(1 + record_overhead), got(1);
  std::size_t opened = 0;
  for (std::size_t i = 0; i < count; ++i) {
    plain[0] = static_cast<unsigned char>(i);
    sealer.seal(plain.data(), 1, record.data());
    got[0] = record[record_header_bytes];
    if (opener.open(record.data(), got.data(), 1, record.data() + record_header_bytes + 1) && got == plain) ++opened;
  }
  CHECK(opened == count);
}

TEST_CASE("a record's header announcing no bytes or more than the largest record is refused, naming the length") {
  unsigned char header[record_header_bytes] = {0, 0, 0, 0};
  CHECK_THROWS_WITH_AS(record_opener::announced(header),
                       "a record of 0 bytes announced, not 1 to 262144: not what a peer of this version sends", link_error);
  const auto too_big = static_cast<std::uint32_t>(max_record_bytes + 1);
  std::memcpy(header, &too_big, sizeof too_big);  // little-endian, as this machine
  CHECK_THROWS_WITH_AS(record_opener::announced(header),
                       "a record of 262145 bytes announced, not 1 to 262144: not what a peer of this version sends", link_error);
  record_sealer sealer(secret_of(8));
  bytes out(max_record_bytes + 1 + record_overhead);
  CHECK_THROWS_AS(sealer.seal(out.data(), max_record_bytes + 1, out.data()), link_error);
}

TEST_CASE("on a TLS link the bytes on the wire are sealed, a flipped bit ends the link, and reads of any size get every byte") {
  auto server_tls = tls_of("node");
  const bytes sent = pattern(3 * max_record_bytes + 777);
  SUBCASE("the relay sees no plaintext and reads of other sizes than the writes get the bytes in order") {
    for (bool tls : {false, true}) {
      CAPTURE(tls);
      link_listener listener("127.0.0.1", tls ? server_tls : nullptr);
      test::tamper_relay watch("127.0.0.1", listener.port(), std::string::npos);
      std::vector<std::string> dropped;
      std::unique_ptr<data_link> accepted;
      std::thread acceptor([&] { accepted = listener.accept("hello", clock_type::now() + test::scaled(10s), dropped); });
      auto connected = connect_link("127.0.0.1", watch.port(), tls ? tls_of("coordinator") : nullptr, "hello", clock_type::now() + test::scaled(10s));
      acceptor.join();
      REQUIRE(accepted);
      // Written in three pieces, read in five others: small reads out of a buffered record, a read that takes a
      // record whole into the caller's memory, a read across records.
      std::thread writer([&] {
        const std::size_t cuts[] = {0, 300000, 300001, sent.size()};
        for (int i = 0; i < 3; ++i) connected->write(sent.data() + cuts[i], cuts[i + 1] - cuts[i], test::scaled(10s), nullptr);
      });
      bytes got(sent.size());
      const std::size_t reads[] = {0, 1, 100000, 100000 + max_record_bytes, 100000 + 2 * max_record_bytes + 5, sent.size()};
      for (int i = 0; i < 5; ++i) accepted->read(got.data() + reads[i], reads[i + 1] - reads[i], test::scaled(10s), nullptr);
      writer.join();
      CHECK(got == sent);
      // The answer goes the other way on the same link, sealed with the other direction's key.
      accepted->write("ok", 2, test::scaled(5s), nullptr);
      char answer[2];
      connected->read(answer, 2, test::scaled(5s), nullptr);
      CHECK(std::string(answer, 2) == "ok");
      connected.reset();
      accepted.reset();
      const bytes& wire = watch.from_client();
      CHECK(wire.size() >= sent.size());
      const bool plaintext_seen = std::search(wire.begin(), wire.end(), sent.begin() + 5000, sent.begin() + 5064) != wire.end();
      CHECK(plaintext_seen == !tls);
    }
  }
  SUBCASE("a bit flipped on the way ends the read with the record's failed authentication") {
    link_listener listener("127.0.0.1", server_tls);
    test::tamper_relay tamper("127.0.0.1", listener.port(), 200000);  // well past the handshake and the hello
    std::vector<std::string> dropped;
    std::unique_ptr<data_link> accepted;
    std::thread acceptor([&] { accepted = listener.accept("hello", clock_type::now() + test::scaled(10s), dropped); });
    auto connected = connect_link("127.0.0.1", tamper.port(), tls_of("coordinator"), "hello", clock_type::now() + test::scaled(10s));
    acceptor.join();
    REQUIRE(accepted);
    std::thread writer([&] {
      try {
        connected->write(sent.data(), sent.size(), test::scaled(10s), nullptr);
      } catch (const link_error&) {  // the reader may hang up first
      }
    });
    bytes got(sent.size());
    std::string error;
    try {
      accepted->read(got.data(), got.size(), test::scaled(10s), nullptr);
    } catch (const link_error& e) {
      CHECK(e.reason == link_error::kind::failed);
      error = e.what();
    }
    accepted.reset();
    writer.join();
    CHECK(contains(error, "bytes failed its authentication: altered, replayed or reordered on the way"));
  }
}

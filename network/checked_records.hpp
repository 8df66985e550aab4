// Note [checked records]: TCP's 16-bit checksum lets a corrupted segment through now and then (Note [checksums]);
// TLS has a MAC, so only plain TCP (--insecure) needs more. Every byte of a plain data link or CAF connection
// travels in a record: payload length (4 bytes LE, 1 to checked_record_bytes), CRC32C of length and payload, then
// the payload. A bad record ends the connection, so the step fails as for a lost link and recovery replays it. No
// byte reaches its reader unchecked. The cost is in docs/robustness.md.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <caf/io/network/native_socket.hpp>
#include <caf/io/network/rw_state.hpp>

namespace ap {

inline constexpr std::size_t checked_record_bytes = std::size_t{256} << 10;  // payload of one record, at most
inline constexpr std::size_t checked_header_bytes = 8;

// The header of a record of n bytes (1 to checked_record_bytes) at `payload`.
void checked_record_header(const void* payload, std::size_t n, unsigned char out[checked_header_bytes]);
// The payload length a header announces; 0 when it is out of range (a corrupted header).
std::size_t checked_record_length(const unsigned char header[checked_header_bytes]);
// The CRC a header carries, and the CRC of its length field (where the running CRC over the payload starts).
std::uint32_t checked_record_crc(const unsigned char header[checked_header_bytes]);
std::uint32_t checked_record_start(const unsigned char header[checked_header_bytes]);

// For CAF's multiplexer: read_some and write_some as caf::policy::tcp's, over one non-blocking socket, in checked
// records (Note [checked records]). `peer` names the connection in failure().
class checked_stream {
 public:
  using rw_state = caf::io::network::rw_state;
  explicit checked_stream(std::string peer) : peer_(std::move(peer)) {}

  rw_state read_some(std::size_t& result, caf::io::network::native_socket fd, void* buf, std::size_t len);
  rw_state write_some(std::size_t& result, caf::io::network::native_socket fd, const void* buf, std::size_t len);
  // Checked bytes held for the next read_some, which the socket no longer signals.
  bool must_read_more() const { return held_taken_ < held_.size(); }
  // Why a record failed; empty for a hang-up or socket error.
  const std::string& failure() const { return failure_; }

 private:
  rw_state fail(const std::string& why);

  std::string peer_;
  std::string failure_;
  // Reading.
  unsigned char in_head_[checked_header_bytes] = {};
  std::size_t in_head_have_ = 0;
  std::size_t in_length_ = 0, in_got_ = 0;
  std::uint32_t in_crc_ = 0;
  bool in_place_ = false;
  std::vector<unsigned char> held_;  // checked payload not yet handed over, from held_taken_
  std::size_t held_taken_ = 0;
  // Writing: the open record and what is still to go of it.
  unsigned char out_head_[checked_header_bytes] = {};
  std::size_t out_head_sent_ = checked_header_bytes, out_left_ = 0;
};

}  // namespace ap

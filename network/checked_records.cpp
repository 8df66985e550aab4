#include "network/checked_records.hpp"

#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "failure/crc32c.hpp"

namespace ap {

namespace {

std::uint32_t load_u32(const unsigned char* p) {
  return static_cast<std::uint32_t>(p[0]) | static_cast<std::uint32_t>(p[1]) << 8 |
         static_cast<std::uint32_t>(p[2]) << 16 | static_cast<std::uint32_t>(p[3]) << 24;
}

void store_u32(std::uint32_t v, unsigned char* p) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}

}  // namespace

void checked_record_header(const void* payload, std::size_t n, unsigned char out[checked_header_bytes]) {
  store_u32(static_cast<std::uint32_t>(n), out);
  store_u32(crc32c(payload, n, crc32c(out, 4)), out + 4);
}

std::size_t checked_record_length(const unsigned char header[checked_header_bytes]) {
  const std::size_t n = load_u32(header);
  return n >= 1 && n <= checked_record_bytes ? n : 0;
}

std::uint32_t checked_record_crc(const unsigned char header[checked_header_bytes]) { return load_u32(header + 4); }

std::uint32_t checked_record_start(const unsigned char header[checked_header_bytes]) { return crc32c(header, 4); }

checked_stream::rw_state checked_stream::fail(const std::string& why) {
  failure_ = why;
  return rw_state::failure;
}

checked_stream::rw_state checked_stream::read_some(std::size_t& result, caf::io::network::native_socket fd, void* buf,
                                                   std::size_t len) {
  result = 0;
  if (!failure_.empty()) return rw_state::failure;
  auto* out = static_cast<unsigned char*>(buf);
  // A socket error or a hang-up after some bytes: those are handed over, and the next call reports it.
  const auto ended = [&](ssize_t r) { return r == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR); };
  while (result < len) {
    if (held_taken_ < held_.size() && in_head_have_ == 0) {  // a checked record's payload, held
      const std::size_t n = std::min(len - result, held_.size() - held_taken_);
      std::memcpy(out + result, held_.data() + held_taken_, n);
      held_taken_ += n, result += n;
      if (held_taken_ == held_.size()) held_.clear(), held_taken_ = 0;
      continue;
    }
    if (in_head_have_ < checked_header_bytes) {
      const ssize_t r = ::recv(fd, in_head_ + in_head_have_, checked_header_bytes - in_head_have_, 0);
      if (r <= 0) {
        if (r < 0 && errno == EINTR) continue;
        if (ended(r)) return result > 0 ? rw_state::success : rw_state::failure;
        return rw_state::success;  // nothing more now
      }
      in_head_have_ += static_cast<std::size_t>(r);
      if (in_head_have_ < checked_header_bytes) continue;
      in_length_ = checked_record_length(in_head_);
      if (in_length_ == 0)
        return fail("a record header from " + peer_ + " claims " + std::to_string(load_u32(in_head_)) +
                    " bytes (1 to " + std::to_string(checked_record_bytes) + "): corrupted on the way (Note [checked records])");
      in_got_ = 0;
      in_crc_ = checked_record_start(in_head_);
      in_place_ = in_length_ <= len - result;  // read and checked in the caller's memory
      if (!in_place_) held_.resize(in_length_), held_taken_ = in_length_;  // not served until checked
    }
    unsigned char* into = in_place_ ? out + result : held_.data();
    const ssize_t r = ::recv(fd, into + in_got_, in_length_ - in_got_, 0);
    if (r <= 0) {
      if (r < 0 && errno == EINTR) continue;
      if (ended(r)) return result > 0 ? rw_state::success : rw_state::failure;
      return rw_state::success;
    }
    in_crc_ = crc32c(into + in_got_, static_cast<std::size_t>(r), in_crc_);
    in_got_ += static_cast<std::size_t>(r);
    if (in_got_ < in_length_) continue;
    if (in_crc_ != checked_record_crc(in_head_))
      return fail("a record of " + std::to_string(in_length_) + " bytes from " + peer_ +
                  " failed its checksum (CRC32C): corrupted on the way (Note [checked records])");
    in_head_have_ = 0;
    if (in_place_) result += in_length_;
    else held_taken_ = 0;  // checked: served from the top of the loop
  }
  return rw_state::success;
}

checked_stream::rw_state checked_stream::write_some(std::size_t& result, caf::io::network::native_socket fd,
                                                    const void* buf, std::size_t len) {
  result = 0;
  if (!failure_.empty()) return rw_state::failure;
  if (len == 0) return rw_state::indeterminate;
  const auto* in = static_cast<const unsigned char*>(buf);
  for (;;) {
    if (out_head_sent_ == checked_header_bytes && out_left_ == 0) {  // no record open: the next one
      if (result == len) return rw_state::success;
      const std::size_t n = std::min(len - result, checked_record_bytes);
      checked_record_header(in + result, n, out_head_);
      out_head_sent_ = 0, out_left_ = n;
    }
    iovec parts[2];
    int count = 0;
    if (out_head_sent_ < checked_header_bytes)
      parts[count++] = {out_head_ + out_head_sent_, checked_header_bytes - out_head_sent_};
    const std::size_t payload = std::min(out_left_, len - result);
    if (payload > 0) parts[count++] = {const_cast<unsigned char*>(in + result), payload};
    msghdr m{};
    m.msg_iov = parts;
    m.msg_iovlen = static_cast<std::size_t>(count);
    const ssize_t r = ::sendmsg(fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (r < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return rw_state::success;
      return result > 0 ? rw_state::success : rw_state::failure;
    }
    std::size_t sent = static_cast<std::size_t>(r);
    const std::size_t head = std::min(sent, checked_header_bytes - out_head_sent_);
    out_head_sent_ += head, sent -= head;
    out_left_ -= sent, result += sent;
    if (out_head_sent_ < checked_header_bytes || out_left_ > 0) return rw_state::success;  // the socket is full
  }
}

}  // namespace ap

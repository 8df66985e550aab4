#include "network/data_link.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <sys/uio.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>
#include <utility>

#include "failure/crc32c.hpp"
#include "network/checked_records.hpp"
#include "network/sealed_records.hpp"
#include "network/tls_session.hpp"

namespace ap {
namespace {

using clock_type = std::chrono::steady_clock;
constexpr std::chrono::milliseconds stop_poll{50};
constexpr std::uint32_t max_hello_bytes = 4096;

std::string system_error(const char* what) { return std::string(what) + ": " + std::strerror(errno); }

void set_nonblocking(int fd) { ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL, 0) | O_NONBLOCK); }

std::string peer_of(int fd) {
  sockaddr_storage a{};
  socklen_t len = sizeof a;
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) return "an unknown peer";
  char host[NI_MAXHOST], port[NI_MAXSERV];
  if (::getnameinfo(reinterpret_cast<sockaddr*>(&a), len, host, sizeof host, port, sizeof port, NI_NUMERICHOST | NI_NUMERICSERV) != 0)
    return "an unknown peer";
  return std::string(host) + ":" + port;
}

// Waits until fd is ready for `events` or `until` passed (false). Asks `stop` every stop_poll.
bool wait_ready(int fd, short events, clock_type::time_point until, const stop_check& stop) {
  for (;;) {
    if (stop) {
      if (std::string why = stop(); !why.empty()) throw link_error(link_error::kind::stopped, why);
    }
    const auto now = clock_type::now();
    if (now >= until) return false;
    const auto slice = std::min<clock_type::duration>(until - now, stop_poll);
    pollfd p{fd, events, 0};
    const int ms = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(slice).count()) + 1;
    const int r = ::poll(&p, 1, ms);
    if (r > 0) return true;  // ready, or an error/hang-up the next call reports
    if (r < 0 && errno != EINTR) throw link_error(link_error::kind::failed, system_error("poll"));
  }
}

// One step of a TLS call (handshake, read or write): ret > 0 done; otherwise what to wait for, or a throw.
short tls_wants(SSL* ssl, int ret, const char* what) {
  const int code = SSL_get_error(ssl, ret);
  if (code == SSL_ERROR_WANT_READ) return POLLIN;
  if (code == SSL_ERROR_WANT_WRITE) return POLLOUT;
  const int saved_errno = errno;
#ifdef SSL_R_UNEXPECTED_EOF_WHILE_READING
  const bool eof = ERR_GET_REASON(ERR_peek_error()) == SSL_R_UNEXPECTED_EOF_WHILE_READING;  // OpenSSL 3's way
#else
  const bool eof = false;
#endif
  std::string why = openssl_errors();
  if (code == SSL_ERROR_ZERO_RETURN || eof ||
      (code == SSL_ERROR_SYSCALL && why.empty() && (saved_errno == 0 || saved_errno == EPIPE || saved_errno == ECONNRESET)))
    throw link_error(link_error::kind::closed, std::string(what) + ": the peer hung up");
  errno = saved_errno;
  if (code == SSL_ERROR_SYSCALL && why.empty()) why = std::strerror(errno);
  const long verify = SSL_get_verify_result(ssl);
  if (verify != X509_V_OK) why += (why.empty() ? "" : "; ") + std::string("certificate: ") + X509_verify_cert_error_string(verify);
  throw link_error(link_error::kind::failed, std::string(what) + ": " + (why.empty() ? "SSL error " + std::to_string(code) : why));
}

void handshake(SSL* ssl, int fd, clock_type::time_point deadline) {
  for (;;) {
    ERR_clear_error();
    const int ret = SSL_do_handshake(ssl);
    if (ret == 1) return;
    const short want = tls_wants(ssl, ret, "TLS handshake");
    if (!wait_ready(fd, want, deadline, nullptr)) throw link_error(link_error::kind::timed_out, "TLS handshake: timed out");
  }
}

struct socket_guard {
  int fd;
  ~socket_guard() {
    if (fd >= 0) ::close(fd);
  }
  int release() { return std::exchange(fd, -1); }
};

struct ssl_guard {
  SSL* ssl;
  ~ssl_guard() { SSL_free(ssl); }
  SSL* release() { return std::exchange(ssl, nullptr); }
};

// A link over fd, TLS when `tls` (server side when `accepted`).
std::unique_ptr<data_link> open_link(int fd, const std::shared_ptr<tls_context>& tls, bool accepted, clock_type::time_point deadline) {
  socket_guard guard{fd};
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  ssl_guard ssl{nullptr};
  if (tls) {
    ssl.ssl = SSL_new(tls->get());
    if (!ssl.ssl) throw link_error(link_error::kind::failed, "cannot create a TLS session (" + openssl_errors() + ")");
    SSL_set_fd(ssl.ssl, fd);
    // Reads no byte past the handshake's: the link's own records follow it (Note [sealed records]).
    SSL_set_read_ahead(ssl.ssl, 0);
    if (accepted) {
      SSL_set_num_tickets(ssl.ssl, 0);  // the client only writes: it would never read a session ticket
      SSL_set_accept_state(ssl.ssl);
    } else {
      SSL_set_connect_state(ssl.ssl);
    }
    block_sigpipe_on_this_thread();
    handshake(ssl.ssl, fd, deadline);
  }
  auto link = std::make_unique<data_link>(fd, ssl.ssl, accepted);
  guard.release();
  return link;
}

std::string framed(const std::string& hello) {
  const std::uint32_t n = static_cast<std::uint32_t>(hello.size());
  std::string bytes(sizeof n, '\0');
  std::memcpy(bytes.data(), &n, sizeof n);
  return bytes + hello;
}

}  // namespace

data_link::data_link(int fd, SSL* ssl, bool accepted) : fd_(fd) {
  if (!ssl) return;
  const auto [client, server] = export_record_secrets(ssl);
  sealer_ = std::make_unique<record_sealer>(accepted ? server : client);
  opener_ = std::make_unique<record_opener>(accepted ? client : server);
}

data_link::~data_link() { ::close(fd_); }

void data_link::interrupt() { ::shutdown(fd_, SHUT_RDWR); }

bool data_link::same_host() const {
  sockaddr_storage mine{}, theirs{};
  socklen_t mine_len = sizeof mine, theirs_len = sizeof theirs;
  if (::getsockname(fd_, reinterpret_cast<sockaddr*>(&mine), &mine_len) != 0 ||
      ::getpeername(fd_, reinterpret_cast<sockaddr*>(&theirs), &theirs_len) != 0 || mine.ss_family != theirs.ss_family)
    return false;
  if (mine.ss_family == AF_INET)
    return reinterpret_cast<sockaddr_in*>(&mine)->sin_addr.s_addr == reinterpret_cast<sockaddr_in*>(&theirs)->sin_addr.s_addr;
  if (mine.ss_family == AF_INET6)
    return std::memcmp(&reinterpret_cast<sockaddr_in6*>(&mine)->sin6_addr, &reinterpret_cast<sockaddr_in6*>(&theirs)->sin6_addr,
                       sizeof(in6_addr)) == 0;
  return false;
}

void data_link::send_open_record(const unsigned char* p, std::size_t payload, std::chrono::milliseconds idle,
                                 const stop_check& stop, const unsigned char* next_p, std::size_t next_n,
                                 unsigned char* next, bool* next_ready) {
  auto until = clock_type::now() + idle;
  while (out_head_sent_ < checked_header_bytes || payload > 0) {
    iovec parts[2];
    int count = 0;
    if (out_head_sent_ < checked_header_bytes) parts[count++] = {out_head_ + out_head_sent_, checked_header_bytes - out_head_sent_};
    if (payload > 0) parts[count++] = {const_cast<unsigned char*>(p), payload};
    msghdr m{};
    m.msg_iov = parts;
    m.msg_iovlen = static_cast<std::size_t>(count);
    const ssize_t ret = ::sendmsg(fd_, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (ret > 0) {
      std::size_t sent = static_cast<std::size_t>(ret);
      const std::size_t head = std::min(sent, checked_header_bytes - out_head_sent_);
      out_head_sent_ += head, sent -= head;
      p += sent, payload -= sent, out_left_ -= sent;
      until = clock_type::now() + idle;
      continue;
    }
    if (ret < 0 && errno == EINTR) continue;
    if (ret < 0 && (errno == EPIPE || errno == ECONNRESET)) throw link_error(link_error::kind::closed, "the peer hung up");
    if (ret < 0 && errno != EAGAIN && errno != EWOULDBLOCK) throw link_error(link_error::kind::failed, system_error("send"));
    if (next_n > 0 && !*next_ready) {  // the socket is full: the next record's CRC meanwhile
      checked_record_header(next_p, next_n, next);
      *next_ready = true;
      continue;
    }
    if (!wait_ready(fd_, POLLOUT, until, stop))
      throw link_error(link_error::kind::timed_out, "no byte could be written for " + std::to_string(idle.count()) + " ms");
  }
}

void data_link::write_checked(const unsigned char* p, std::size_t n, std::chrono::milliseconds idle, const stop_check& stop) {
  if (out_head_sent_ < checked_header_bytes || out_left_ > 0) {  // the rest of a record write_now opened
    const std::size_t part = std::min(n, out_left_);
    send_open_record(p, part, idle, stop, nullptr, 0, nullptr, nullptr);
    p += part, n -= part;
  }
  unsigned char next[checked_header_bytes];
  bool next_ready = false;
  while (n > 0) {
    const std::size_t part = std::min(n, checked_record_bytes);
    if (next_ready) std::memcpy(out_head_, next, sizeof next);
    else checked_record_header(p, part, out_head_);
    next_ready = false;
    out_head_sent_ = 0, out_left_ = part;
    const std::size_t next_n = std::min(n - part, checked_record_bytes);
    send_open_record(p, part, idle, stop, p + part, next_n, next, &next_ready);
    p += part, n -= part;
  }
}

void data_link::read_checked(unsigned char* p, std::size_t n, std::chrono::milliseconds idle, const stop_check& stop) {
  while (n > 0) {
    if (opened_taken_ < opened_.size()) {  // a checked record's rest
      const std::size_t part = std::min(n, opened_.size() - opened_taken_);
      std::memcpy(p, opened_.data() + opened_taken_, part);
      opened_taken_ += part, p += part, n -= part;
      continue;
    }
    unsigned char header[checked_header_bytes];
    read_bytes(header, sizeof header, idle, stop);
    const std::size_t length = checked_record_length(header);
    if (length == 0)
      throw link_error(link_error::kind::failed,
                       "a record header from " + peer_of(fd_) + " claims " +
                           std::to_string(std::uint32_t{header[0]} | std::uint32_t{header[1]} << 8 |
                                          std::uint32_t{header[2]} << 16 | std::uint32_t{header[3]} << 24) +
                           " bytes (1 to " + std::to_string(checked_record_bytes) +
                           "): corrupted on the way (Note [checked records])",
                       true);
    unsigned char* into = p;  // the caller's memory when the record fits it whole
    if (length > n) {
      opened_.resize(length);
      opened_taken_ = length;  // not handed out before it is checked
      into = opened_.data();
    }
    std::uint32_t crc = checked_record_start(header);
    read_bytes(into, length, idle, stop, &crc);
    if (crc != checked_record_crc(header))
      throw link_error(link_error::kind::failed,
                       "a record of " + std::to_string(length) + " bytes from " + peer_of(fd_) +
                           " failed its checksum (CRC32C): corrupted on the way (Note [checked records])",
                       true);
    if (into == p) p += length, n -= length;
    else opened_taken_ = 0;
  }
}

void data_link::write(const void* data, std::size_t n, std::chrono::milliseconds idle, const stop_check& stop) {
  if (!sealer_) return write_checked(static_cast<const unsigned char*>(data), n, idle, stop);
  const auto* p = static_cast<const unsigned char*>(data);
  while (n > 0) {  // Note [sealed records]
    const std::size_t part = std::min(n, max_record_bytes);
    sealed_.resize(part + record_overhead);
    sealer_->seal(p, part, sealed_.data());
    write_bytes(sealed_.data(), sealed_.size(), idle, stop);
    p += part, n -= part;
  }
}

void data_link::write_bytes(const void* data, std::size_t n, std::chrono::milliseconds idle, const stop_check& stop) {
  const auto* p = static_cast<const char*>(data);
  auto until = clock_type::now() + idle;
  while (n > 0) {
    const ssize_t ret = ::send(fd_, p, n, MSG_NOSIGNAL);
    if (ret > 0) {
      p += ret, n -= static_cast<std::size_t>(ret);
      until = clock_type::now() + idle;
      continue;
    }
    if (ret < 0 && errno == EINTR) continue;
    if (ret < 0 && (errno == EPIPE || errno == ECONNRESET)) throw link_error(link_error::kind::closed, "the peer hung up");
    if (ret < 0 && errno != EAGAIN && errno != EWOULDBLOCK) throw link_error(link_error::kind::failed, system_error("send"));
    if (!wait_ready(fd_, POLLOUT, until, stop))
      throw link_error(link_error::kind::timed_out, "no byte could be written for " + std::to_string(idle.count()) + " ms");
  }
}

std::size_t data_link::write_now(const piece* pieces, std::size_t count) {
  if (sealer_) return 0;  // Note [writes without waiting]
  if (out_head_sent_ < checked_header_bytes || out_left_ > 0) return 0;
  // Each piece in records of its own, up to what a socket may take now (4 MB).
  struct framed {
    unsigned char head[checked_header_bytes];
    const unsigned char* payload;
    std::size_t size;
  };
  std::vector<framed> records;
  std::size_t framed_bytes = 0;
  for (std::size_t i = 0; i < count && framed_bytes < (std::size_t{4} << 20); ++i) {
    const auto* p = static_cast<const unsigned char*>(pieces[i].data);
    for (std::size_t left = pieces[i].size; left > 0 && framed_bytes < (std::size_t{4} << 20);) {
      framed r{{}, p, std::min(left, checked_record_bytes)};
      checked_record_header(p, r.size, r.head);
      records.push_back(r);
      p += r.size, left -= r.size, framed_bytes += r.size;
    }
  }
  std::vector<iovec> v;
  v.reserve(2 * records.size());
  for (framed& r : records) {
    v.push_back({r.head, checked_header_bytes});
    v.push_back({const_cast<unsigned char*>(r.payload), r.size});
  }
  msghdr m{};
  m.msg_iov = v.data();
  m.msg_iovlen = v.size();
  ssize_t ret = -1;
  for (;;) {
    ret = ::sendmsg(fd_, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (ret >= 0 || errno != EINTR) break;
  }
  if (ret <= 0) return 0;
  std::size_t sent = static_cast<std::size_t>(ret), payload = 0;
  for (framed& r : records) {
    if (sent >= checked_header_bytes + r.size) {
      sent -= checked_header_bytes + r.size, payload += r.size;
      continue;
    }
    std::memcpy(out_head_, r.head, checked_header_bytes);
    out_head_sent_ = std::min(sent, checked_header_bytes);
    const std::size_t part = sent - out_head_sent_;
    out_left_ = r.size - part, payload += part;
    break;
  }
  return payload;
}

bool data_link::readable() const {
  if (opened_taken_ < opened_.size()) return true;
  pollfd p{fd_, POLLIN, 0};
  return ::poll(&p, 1, 0) > 0;
}

void data_link::read(void* data, std::size_t n, std::chrono::milliseconds idle, const stop_check& stop) {
  if (!opener_) return read_checked(static_cast<unsigned char*>(data), n, idle, stop);
  auto* p = static_cast<unsigned char*>(data);
  while (n > 0) {  // Note [sealed records]
    if (opened_taken_ < opened_.size()) {
      const std::size_t part = std::min(n, opened_.size() - opened_taken_);
      std::memcpy(p, opened_.data() + opened_taken_, part);
      opened_taken_ += part, p += part, n -= part;
      continue;
    }
    unsigned char header[record_header_bytes], tag[record_tag_bytes];
    read_bytes(header, sizeof header, idle, stop);
    const std::size_t length = record_opener::announced(header);
    unsigned char* into = p;  // the caller's memory when the record fits it whole
    if (length > n) {
      opened_.resize(length);
      opened_taken_ = 0;
      into = opened_.data();
    }
    read_bytes(into, length, idle, stop);
    read_bytes(tag, sizeof tag, idle, stop);
    if (!opener_->open(header, into, length, tag))
      throw link_error(link_error::kind::failed,
                       "a record of " + std::to_string(length) +
                           " bytes failed its authentication: altered, replayed or reordered on the way",
                       true);
    if (into == p) p += length, n -= length;
  }
}

void data_link::read_bytes(void* data, std::size_t n, std::chrono::milliseconds idle, const stop_check& stop,
                           std::uint32_t* crc) {
  auto* p = static_cast<char*>(data);
  auto until = clock_type::now() + idle;
  while (n > 0) {
    const ssize_t ret = ::recv(fd_, p, n, 0);
    if (ret > 0) {
      if (crc) *crc = crc32c(p, static_cast<std::size_t>(ret), *crc);  // the bytes just come, in cache
      p += ret, n -= static_cast<std::size_t>(ret);
      until = clock_type::now() + idle;
      continue;
    }
    if (ret == 0 || (ret < 0 && errno == ECONNRESET)) throw link_error(link_error::kind::closed, "the peer hung up");
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) throw link_error(link_error::kind::failed, system_error("recv"));
    if (!wait_ready(fd_, POLLIN, until, stop))
      throw link_error(link_error::kind::timed_out, "no byte came for " + std::to_string(idle.count()) + " ms");
  }
}

std::unique_ptr<data_link> connect_link(const std::string& host, std::uint16_t port, const std::shared_ptr<tls_context>& tls,
                                        const std::string& hello, clock_type::time_point deadline) {
  const std::string where = host + ":" + std::to_string(port);
  std::string last = "nothing answered";
  for (;;) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    if (const int e = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found); e != 0)
      throw link_error(link_error::kind::failed, "cannot resolve " + where + ": " + ::gai_strerror(e));
    std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> addresses(found, ::freeaddrinfo);
    for (addrinfo* a = found; a; a = a->ai_next) {
      socket_guard fd{::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol)};
      if (fd.fd < 0) continue;
      set_nonblocking(fd.fd);
      if (::connect(fd.fd, a->ai_addr, a->ai_addrlen) != 0) {
        if (errno != EINPROGRESS) {
          last = std::strerror(errno);
          continue;
        }
        if (!wait_ready(fd.fd, POLLOUT, deadline, nullptr)) throw link_error(link_error::kind::timed_out, "cannot reach " + where + ": timed out");
        int error = 0;
        socklen_t len = sizeof error;
        ::getsockopt(fd.fd, SOL_SOCKET, SO_ERROR, &error, &len);
        if (error != 0) {
          last = std::strerror(error);
          continue;
        }
      }
      try {
        auto link = open_link(fd.release(), tls, false, deadline);
        const std::string bytes = framed(hello);
        link->write(bytes.data(), bytes.size(), std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock_type::now()) +
                                                    std::chrono::milliseconds(1), nullptr);
        return link;
      } catch (const link_error& e) {
        throw link_error(e.reason, where + ": " + e.what());
      }
    }
    if (clock_type::now() + std::chrono::milliseconds(50) >= deadline)
      throw link_error(link_error::kind::timed_out, "cannot reach " + where + ": " + last);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

link_listener::link_listener(const std::string& host, std::shared_ptr<tls_context> tls) : tls_(std::move(tls)) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  if (const int e = ::getaddrinfo(host.empty() ? nullptr : host.c_str(), "0", &hints, &found); e != 0)
    throw link_error(link_error::kind::failed, "cannot resolve " + host + ": " + ::gai_strerror(e));
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> addresses(found, ::freeaddrinfo);
  std::string last = "no address";
  for (addrinfo* a = found; a; a = a->ai_next) {
    socket_guard fd{::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol)};
    if (fd.fd < 0) continue;
    const int one = 1;
    ::setsockopt(fd.fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd.fd, a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd.fd, 16) != 0) {
      last = std::strerror(errno);
      continue;
    }
    sockaddr_storage bound{};
    socklen_t len = sizeof bound;
    ::getsockname(fd.fd, reinterpret_cast<sockaddr*>(&bound), &len);
    port_ = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                              : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
    set_nonblocking(fd.fd);
    fd_ = fd.release();
    return;
  }
  throw link_error(link_error::kind::failed, "cannot listen on " + (host.empty() ? std::string("every interface") : host) + ": " + last);
}

link_listener::~link_listener() {
  if (fd_ >= 0) ::close(fd_);
}

void link_listener::interrupt() { ::shutdown(fd_, SHUT_RDWR); }

std::unique_ptr<data_link> link_listener::accept(const std::string& hello, clock_type::time_point deadline,
                                                 std::vector<std::string>& dropped) {
  for (;;) {
    if (!wait_ready(fd_, POLLIN, deadline, nullptr)) throw link_error(link_error::kind::timed_out, "nobody connected");
    const int fd = ::accept4(fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0 && errno == EINVAL) throw link_error(link_error::kind::stopped, "the listener was interrupted");
    if (fd < 0) continue;  // gone again before we took it, or EAGAIN
    const std::string from = peer_of(fd);
    // One candidate at a time: a silent one may hold the others up by at most 5 s.
    const auto until = std::min(deadline, clock_type::now() + std::chrono::seconds(5));
    try {
      auto link = open_link(fd, tls_, true, until);
      std::uint32_t n = 0;
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - clock_type::now()) + std::chrono::milliseconds(1);
      link->read(&n, sizeof n, left, nullptr);
      if (n > max_hello_bytes) throw link_error(link_error::kind::failed, "a hello of " + std::to_string(n) + " bytes");
      std::string said(n, '\0');
      link->read(said.data(), n, left, nullptr);
      if (said == hello) return link;
      dropped.push_back("a connection from " + from + " that said '" + said + "', not '" + hello + "'");
    } catch (const link_error& e) {
      dropped.push_back("a connection from " + from + ": " + e.what());
    }
  }
}

}  // namespace ap

// TLS over one non-blocking socket for CAF's multiplexer: OpenSSL directly, one context per process. CAF 0.17's
// OpenSSL session cannot serve: it re-reads the certificate files per connection, hides whether its handshake is
// done (a silent peer spins the I/O thread), and drops OpenSSL's reason for a failure.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include <caf/io/network/native_socket.hpp>
#include <caf/io/network/rw_state.hpp>

#include "network/transport_security.hpp"

typedef struct ssl_ctx_st SSL_CTX;
typedef struct ssl_st SSL;

namespace ap {

// This side's certificate and key, the CA, and peer verification both ways (Note [mutual TLS]). TLS 1.2 or newer.
class tls_context {
 public:
  // Throws std::invalid_argument naming the flag and file.
  tls_context(const transport_security& s, const std::string& who);
  ~tls_context();
  tls_context(const tls_context&) = delete;
  tls_context& operator=(const tls_context&) = delete;
  SSL_CTX* get() const { return ctx_; }

 private:
  SSL_CTX* ctx_ = nullptr;
};

// This thread's queued OpenSSL errors, joined by "; " and cleared.
std::string openssl_errors();
// Blocks SIGPIPE on the calling thread, once.
void block_sigpipe_on_this_thread();

class tls_session {
 public:
  using rw_state = caf::io::network::rw_state;
  // Starts the handshake on `fd` as the server (`accepted`) or the client.
  tls_session(std::shared_ptr<tls_context> context, caf::io::network::native_socket fd, bool accepted);
  ~tls_session();
  tls_session(const tls_session&) = delete;
  tls_session& operator=(const tls_session&) = delete;

  // As caf::policy::tcp's: success with result 0 while the handshake waits for the peer.
  rw_state read_some(std::size_t& result, void* buf, std::size_t len);
  rw_state write_some(std::size_t& result, const void* buf, std::size_t len);
  bool must_read_more(std::size_t threshold) const;

  bool handshake_done() const { return done_; }
  const std::string& failure() const { return failure_; }  // why the last failure happened

 private:
  rw_state handshake();
  rw_state fail(int ret, const char* what);

  std::shared_ptr<tls_context> context_;
  SSL* ssl_ = nullptr;
  bool done_ = false;
  std::string failure_;
};

}  // namespace ap

#include "network/tls_session.hpp"

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509_vfy.h>
#include <signal.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <fstream>
#include <stdexcept>

namespace ap {

std::string openssl_errors() {
  std::string text;
  while (unsigned long e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof buf);
    text += (text.empty() ? "" : "; ") + std::string(buf);
  }
  return text;
}

// A write to a socket the peer closed raises SIGPIPE, which ends the process; OpenSSL cannot pass MSG_NOSIGNAL,
// so every thread that writes through OpenSSL blocks it (a pending SIGPIPE stays pending, harmlessly).
void block_sigpipe_on_this_thread() {
  thread_local bool blocked = false;
  if (blocked) return;
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  blocked = true;
}

namespace {

std::string in_parens(const std::string& text) { return text.empty() ? "" : " (" + text + ")"; }

void check_readable(const std::string& flag, const std::string& path, const std::string& who) {
  if (path.empty())
    throw std::invalid_argument(who + ": " + flag + " FILE is missing (mutual TLS needs --tls-ca, --tls-cert and --tls-key)");
  std::ifstream f(path);
  if (!f) throw std::invalid_argument(who + ": " + flag + " " + path + ": cannot read the file (missing, or no permission)");
}

void check_pem(const std::string& flag, const std::string& path, const std::string& who, bool key) {
  std::unique_ptr<FILE, decltype(&std::fclose)> f(std::fopen(path.c_str(), "r"), std::fclose);
  bool ok = false;
  if (f && key) {
    EVP_PKEY* k = PEM_read_PrivateKey(f.get(), nullptr, nullptr, const_cast<char*>(""));
    ok = k != nullptr;
    EVP_PKEY_free(k);
  } else if (f) {
    X509* c = PEM_read_X509(f.get(), nullptr, nullptr, nullptr);
    ok = c != nullptr;
    X509_free(c);
  }
  if (!ok)
    throw std::invalid_argument(who + ": " + flag + " " + path + ": not " +
                                (key ? "an unencrypted PEM private key" : "a PEM certificate") + in_parens(openssl_errors()));
}

}  // namespace

tls_context::tls_context(const transport_security& s, const std::string& who) {
  check_readable("--tls-ca", s.ca_file, who);
  check_readable("--tls-cert", s.certificate_file, who);
  check_readable("--tls-key", s.key_file, who);
  check_pem("--tls-cert", s.certificate_file, who, false);
  check_pem("--tls-key", s.key_file, who, true);
  check_pem("--tls-ca", s.ca_file, who, false);
  ERR_clear_error();
  ctx_ = SSL_CTX_new(TLS_method());
  if (!ctx_) throw std::runtime_error(who + ": cannot create an OpenSSL context" + in_parens(openssl_errors()));
  const auto refuse = [&](const std::string& what) {
    SSL_CTX_free(ctx_);
    ctx_ = nullptr;
    throw std::invalid_argument(who + ": " + what);
  };
  SSL_CTX_set_min_proto_version(ctx_, TLS1_2_VERSION);
  if (SSL_CTX_use_certificate_chain_file(ctx_, s.certificate_file.c_str()) != 1)
    refuse("--tls-cert " + s.certificate_file + ": cannot load the certificate" + in_parens(openssl_errors()));
  if (SSL_CTX_use_PrivateKey_file(ctx_, s.key_file.c_str(), SSL_FILETYPE_PEM) != 1 || SSL_CTX_check_private_key(ctx_) != 1)
    refuse("--tls-key " + s.key_file + " does not belong to the certificate --tls-cert " + s.certificate_file +
           in_parens(openssl_errors()));
  if (SSL_CTX_load_verify_locations(ctx_, s.ca_file.c_str(), nullptr) != 1)
    refuse("--tls-ca " + s.ca_file + ": cannot load the CA certificate" + in_parens(openssl_errors()));
  // Our own certificate must be signed by the CA, or every peer would refuse us: fail now, not per connection.
  std::unique_ptr<X509_STORE_CTX, decltype(&X509_STORE_CTX_free)> verify(X509_STORE_CTX_new(), X509_STORE_CTX_free);
  if (!verify || X509_STORE_CTX_init(verify.get(), SSL_CTX_get_cert_store(ctx_), SSL_CTX_get0_certificate(ctx_), nullptr) != 1)
    refuse("cannot verify --tls-cert" + in_parens(openssl_errors()));
  if (X509_verify_cert(verify.get()) != 1)
    refuse("--tls-cert " + s.certificate_file + " is not signed by the CA --tls-ca " + s.ca_file + ": " +
           X509_verify_cert_error_string(X509_STORE_CTX_get_error(verify.get())));
  SSL_CTX_set_verify(ctx_, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
  // Note [bulk cipher]: TLS 1.3's AES-128-GCM first (OpenSSL's default list starts with the slower AES-256-GCM):
  // connections carry tensors, and encryption is most of what TLS costs them. Every peer accepts both.
  if (SSL_CTX_set_ciphersuites(ctx_, "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256") != 1)
    refuse("cannot set the TLS 1.3 cipher suites" + in_parens(openssl_errors()));
  SSL_CTX_set_mode(ctx_, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  // Note [TLS read-ahead]: without it OpenSSL reads each record with two system calls (header, then body of at
  // most 16 KB); with it, one read fills up to 256 KB of records. OpenSSL then holds bytes the socket no longer
  // signals, so must_read_more asks for them (SSL_has_pending) and CAF's read loop goes on until they are used.
  SSL_CTX_set_read_ahead(ctx_, 1);
  SSL_CTX_set_default_read_buffer_len(ctx_, std::size_t{256} << 10);
  ERR_clear_error();
}

tls_context::~tls_context() { SSL_CTX_free(ctx_); }

tls_session::tls_session(std::shared_ptr<tls_context> context, caf::io::network::native_socket fd, bool accepted)
    : context_(std::move(context)), ssl_(SSL_new(context_->get())) {
  if (!ssl_) throw std::runtime_error("cannot create a TLS session" + in_parens(openssl_errors()));
  SSL_set_fd(ssl_, fd);
  if (accepted) {
    SSL_set_accept_state(ssl_);
  } else {
    SSL_set_connect_state(ssl_);
    block_sigpipe_on_this_thread();
    handshake();  // the client hello; later steps run on read events
  }
}

tls_session::~tls_session() { SSL_free(ssl_); }

tls_session::rw_state tls_session::fail(int ret, const char* what) {
  const int code = SSL_get_error(ssl_, ret);
  std::string why = openssl_errors();
  if (!done_) {
    const long verify = SSL_get_verify_result(ssl_);
    if (verify != X509_V_OK) why += (why.empty() ? "" : "; ") + std::string("certificate: ") + X509_verify_cert_error_string(verify);
  }
  if (why.empty()) why = code == SSL_ERROR_ZERO_RETURN || code == SSL_ERROR_SYSCALL ? "the peer hung up" : "SSL error " + std::to_string(code);
  failure_ = std::string(what) + ": " + why;
  return rw_state::failure;
}

tls_session::rw_state tls_session::handshake() {
  ERR_clear_error();
  const int ret = SSL_do_handshake(ssl_);
  if (ret == 1) {
    done_ = true;
    return rw_state::success;
  }
  const int code = SSL_get_error(ssl_, ret);
  if (code == SSL_ERROR_WANT_READ || code == SSL_ERROR_WANT_WRITE) return rw_state::indeterminate;
  return fail(ret, "TLS handshake");
}

tls_session::rw_state tls_session::read_some(std::size_t& result, void* buf, std::size_t len) {
  result = 0;
  block_sigpipe_on_this_thread();
  if (!failure_.empty()) return rw_state::failure;
  if (!done_) {
    const rw_state h = handshake();
    if (h == rw_state::failure) return h;
    if (!done_) return rw_state::success;  // wait for the peer's next bytes
  }
  // One SSL_read yields at most one record: loop until `len` or the socket is drained.
  auto* out = static_cast<char*>(buf);
  while (result < len) {
    ERR_clear_error();
    const int ret = SSL_read(ssl_, out + result, static_cast<int>(std::min<std::size_t>(len - result, INT_MAX)));
    if (ret > 0) {
      result += static_cast<std::size_t>(ret);
      continue;
    }
    const int code = SSL_get_error(ssl_, ret);
    if (code == SSL_ERROR_WANT_READ || code == SSL_ERROR_WANT_WRITE) return rw_state::success;
    if (result > 0) return rw_state::success;  // hand over what came; the failure repeats on the next read
    return fail(ret, "TLS read");
  }
  return rw_state::success;
}

tls_session::rw_state tls_session::write_some(std::size_t& result, const void* buf, std::size_t len) {
  result = 0;
  block_sigpipe_on_this_thread();
  if (!failure_.empty()) return rw_state::failure;
  // Nothing is written before the handshake is done: it runs on read events, and a write waiting here would spin
  // the I/O thread.
  if (!done_) return rw_state::success;
  if (len == 0) return rw_state::indeterminate;
  // Loop until `len` or the socket is full (as for reads).
  const auto* in = static_cast<const char*>(buf);
  while (result < len) {
    ERR_clear_error();
    const int ret = SSL_write(ssl_, in + result, static_cast<int>(std::min<std::size_t>(len - result, INT_MAX)));
    if (ret > 0) {
      result += static_cast<std::size_t>(ret);
      continue;
    }
    const int code = SSL_get_error(ssl_, ret);
    if (code == SSL_ERROR_WANT_READ || code == SSL_ERROR_WANT_WRITE) return rw_state::success;
    if (result > 0) return rw_state::success;
    return fail(ret, "TLS write");
  }
  return rw_state::success;
}

// Any bytes OpenSSL holds, decrypted or not, whatever CAF's threshold (Note [TLS read-ahead]).
bool tls_session::must_read_more(std::size_t) const { return SSL_has_pending(ssl_) == 1; }

}  // namespace ap

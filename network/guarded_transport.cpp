#include "network/guarded_transport.hpp"

#include <sys/socket.h>

#include <map>
#include <mutex>

#include <caf/all.hpp>
#include <caf/detail/socket_guard.hpp>
#include <caf/io/all.hpp>
#include <caf/io/middleman_actor_impl.hpp>
#include <caf/io/network/default_multiplexer.hpp>
#include <caf/io/network/doorman_impl.hpp>
#include <caf/io/network/stream_impl.hpp>
#include <caf/policy/tcp.hpp>

#include "network/checked_records.hpp"
#include "network/tls_session.hpp"

namespace ap {
namespace {

using caf::io::network::native_socket;
using caf::io::network::rw_state;
using default_mpx = caf::io::network::default_multiplexer;

const caf::atom_value registry_key = caf::atom("aptransp");
// The registered transports' TLS contexts (CAF's registry holds actors only).
std::mutex registered_tls_mutex;
std::map<const caf::actor_system*, std::shared_ptr<tls_context>> registered_tls;

std::string peer_of(native_socket fd) {
  auto addr = caf::io::network::remote_addr_of_fd(fd);
  auto port = caf::io::network::remote_port_of_fd(fd);
  return (addr ? *addr : std::string("?")) + ":" + (port ? std::to_string(*port) : std::string("?"));
}

std::string size_text(std::size_t bytes) {
  if (bytes >= (std::size_t{1} << 20)) return std::to_string(bytes >> 20) + " MiB (" + std::to_string(bytes) + " bytes)";
  return std::to_string(bytes) + " bytes";
}

// What one connection has seen, shared by its scribe and policy. Only accepted connections are logged.
struct connection_watch {
  std::string peer;  // host:port of the other side
  bool accepted = false;
  int reads_configured = 0;  // header, handshake payload, header: then the handshake is done
  bool logged = false;
  std::function<void(const std::string&)> log;
  std::function<void()> on_tls_ready;  // the scribe's held flush

  bool handshake_done() const { return reads_configured >= 3; }
  void drop(const std::string& why) {
    if (logged || !accepted || !log) return;
    logged = true;
    log("dropped a connection from " + peer + ": " + why);
  }
  // A failed checksum ends the connection, whichever side opened it.
  void corrupted(const std::string& why) {
    if (logged || !log) return;
    logged = true;
    log(std::string(accepted ? "dropped a connection from " : "dropped the connection to ") + peer + ": " + why);
  }
};

// Reads and writes through a TLS session, or the plain socket in checked records (Note [checked records]).
struct guarded_policy {
  guarded_policy(std::unique_ptr<tls_session> session, std::shared_ptr<connection_watch> watch)
      : session_(std::move(session)), watch_(std::move(watch)), plain_(watch_->peer) {}

  rw_state read_some(std::size_t& result, native_socket fd, void* buf, std::size_t len) {
    if (!session_) return check(plain_.read_some(result, fd, buf, len));
    return check(session_->read_some(result, buf, len));
  }
  rw_state write_some(std::size_t& result, native_socket fd, const void* buf, std::size_t len) {
    if (!session_) return check(plain_.write_some(result, fd, buf, len));
    return check(session_->write_some(result, buf, len));
  }
  bool try_accept(native_socket& result, native_socket fd) { return caf::policy::tcp::try_accept(result, fd); }
  bool must_read_more(native_socket, std::size_t threshold) {
    return session_ ? session_->must_read_more(threshold) : plain_.must_read_more();
  }

 private:
  rw_state check(rw_state r) {
    if (session_ && session_->handshake_done() && !tls_ready_) {
      tls_ready_ = true;
      if (watch_->on_tls_ready) watch_->on_tls_ready();
    }
    if (r == rw_state::failure && !session_ && !plain_.failure().empty()) {
      if (watch_->handshake_done())
        watch_->corrupted(plain_.failure());
      else  // its first bytes: rather a peer that speaks something else than a corrupted one
        watch_->drop("not actorpipe's plain TCP (" + plain_.failure() +
                     "): a TLS peer, another version, or another program?");
      return r;
    }
    if (r != rw_state::failure || watch_->handshake_done()) return r;
    if (session_)
      watch_->drop(session_->handshake_done() ? session_->failure() + " (before CAF's handshake)"
                                              : session_->failure() + " (no certificate signed by our CA, or not TLS?)");
    else
      watch_->drop("it hung up before completing a handshake");
    return r;
  }

  std::unique_ptr<tls_session> session_;
  std::shared_ptr<connection_watch> watch_;
  checked_stream plain_;  // without a session
  bool tls_ready_ = false;
};

// Note [bounded frames].
class guarded_scribe : public caf::io::scribe {
 public:
  guarded_scribe(default_mpx& mpx, native_socket fd, std::unique_ptr<tls_session> session,
                 std::shared_ptr<connection_watch> watch, frame_limits limits)
      : scribe(caf::io::network::conn_hdl_from_socket(fd)),
        watch_(watch),
        limits_(limits),
        tls_(session != nullptr),
        stream_(mpx, fd, std::move(session), std::move(watch)) {
    // Held until the TLS handshake is done: a write pending during it would keep the socket on the write list.
    watch_->on_tls_ready = [this] {
      tls_ready_ = true;
      if (flush_held_) stream_.flush(this);
      flush_held_ = false;
    };
  }

  void configure_read(caf::io::receive_policy::config config) override {
    const std::size_t limit = watch_->reads_configured < 2 ? limits_.first_frame_bytes : limits_.frame_bytes;
    ++watch_->reads_configured;
    if (config.second > limit) {
      watch_->drop("a message header claims " + size_text(config.second) + ", more than the limit of " +
                   size_text(limit) + (watch_->reads_configured <= 2 ? " before a handshake" : "") +
                   " (malformed or hostile)");
      // Shut down instead of allocating: CAF cleans up as for any closed connection.
      ::shutdown(stream_.fd(), SHUT_RDWR);
      config.second = 1;
    }
    stream_.configure_read(config);
    if (!launched_) launch();
  }
  void ack_writes(bool enable) override { stream_.ack_writes(enable); }
  std::vector<char>& wr_buf() override { return stream_.wr_buf(); }
  std::vector<char>& rd_buf() override { return stream_.rd_buf(); }
  void graceful_shutdown() override {
    // BASP closes a connection whose header or handshake it cannot parse.
    if (!watch_->handshake_done()) watch_->drop("malformed: not a handshake of CAF's protocol (BASP)");
    watch_->on_tls_ready = nullptr;
    stream_.graceful_shutdown();
    detach(&stream_.backend(), false);
  }
  void flush() override {
    if (tls_ && !tls_ready_) {
      flush_held_ = true;
      return;
    }
    stream_.flush(this);
  }
  std::string addr() const override {
    auto x = caf::io::network::remote_addr_of_fd(stream_.fd());
    return x ? *x : "";
  }
  std::uint16_t port() const override {
    auto x = caf::io::network::remote_port_of_fd(stream_.fd());
    return x ? *x : 0;
  }
  void add_to_loop() override { stream_.activate(this); }
  void remove_from_loop() override { stream_.passivate(); }

 private:
  void launch() {
    launched_ = true;
    stream_.start(this);  // reads drive a TLS handshake (tls_session.hpp); writes wait for it (flush)
  }

  std::shared_ptr<connection_watch> watch_;
  frame_limits limits_;
  bool tls_ = false;
  bool tls_ready_ = false;
  bool flush_held_ = false;
  bool launched_ = false;
  caf::io::network::stream_impl<guarded_policy> stream_;
};

caf::io::scribe_ptr make_scribe(default_mpx& mpx, native_socket fd, bool accepted, const transport_options& options) {
  auto watch = std::make_shared<connection_watch>();
  watch->peer = peer_of(fd);
  watch->accepted = accepted;
  watch->log = options.log;
  std::unique_ptr<tls_session> session;
  if (options.tls) session = std::make_unique<tls_session>(options.tls, fd, accepted);
  return caf::make_counted<guarded_scribe>(mpx, fd, std::move(session), std::move(watch), options.limits);
}

class guarded_doorman : public caf::io::network::doorman_impl {
 public:
  guarded_doorman(default_mpx& mpx, native_socket fd, transport_options options)
      : doorman_impl(mpx, fd), options_(std::move(options)) {}

  bool new_connection() override {
    if (detached()) return false;  // the broker let go while the multiplexer still had events for us
    auto& mpx = acceptor_.backend();
    const native_socket fd = acceptor_.accepted_socket();
    caf::detail::socket_guard guard{fd};
    caf::io::network::nonblocking(fd, true);
    auto scribe = make_scribe(mpx, fd, true, options_);
    guard.release();  // the scribe owns the socket now
    const auto hdl = scribe->hdl();
    parent()->add_scribe(std::move(scribe));
    return doorman::new_connection(&mpx, hdl);
  }

 private:
  transport_options options_;
};

class guarded_middleman : public caf::io::middleman_actor_impl {
 public:
  guarded_middleman(caf::actor_config& cfg, caf::actor broker, transport_options options)
      : middleman_actor_impl(cfg, std::move(broker)), options_(std::move(options)) {}

  const char* name() const override { return "ap::guarded_middleman"; }

 protected:
  caf::expected<caf::io::scribe_ptr> connect(const std::string& host, std::uint16_t port) override {
    auto fd = caf::io::network::new_tcp_connection(host, port);
    if (!fd) return std::move(fd.error());
    caf::io::network::nonblocking(*fd, true);
    return make_scribe(mpx(), *fd, false, options_);
  }

  caf::expected<caf::io::doorman_ptr> open(std::uint16_t port, const char* addr, bool reuse) override {
    auto fd = caf::io::network::new_tcp_acceptor_impl(port, addr, reuse);
    if (!fd) return std::move(fd.error());
    return caf::make_counted<guarded_doorman>(mpx(), *fd, options_);
  }

 private:
  default_mpx& mpx() { return static_cast<default_mpx&>(system().middleman().backend()); }
  transport_options options_;
};

}  // namespace

guarded_transport::guarded_transport(caf::actor_system& system, const transport_security& security,
                                     transport_options options)
    : system_(system), registered_(options.registered) {
  if (security.tls()) options.tls = std::make_shared<tls_context>(security, "transport");
  tls_ = options.tls;
  auto broker = system.middleman().named_broker<caf::io::basp_broker>(caf::atom("BASP"));
  actor_ = caf::actor_cast<caf::io::middleman_actor>(
      system.spawn<guarded_middleman, caf::detached + caf::hidden>(std::move(broker), std::move(options)));
  if (registered_) {
    system.registry().put(registry_key, actor_);
    std::lock_guard lock(registered_tls_mutex);
    registered_tls[&system] = tls_;
  }
}

guarded_transport::~guarded_transport() {
  if (registered_) {
    system_.registry().erase(registry_key);
    std::lock_guard lock(registered_tls_mutex);
    registered_tls.erase(&system_);
  }
  caf::scoped_actor self{system_, true};
  self->send_exit(actor_, caf::exit_reason::kill);
  self->wait_for(actor_);
  actor_ = nullptr;
}

caf::expected<std::uint16_t> guarded_transport::publish(const caf::actor& whom, std::uint16_t port,
                                                        const std::string& host, bool reuse) {
  auto f = caf::make_function_view(actor_);
  return f(caf::publish_atom::value, port, caf::actor_cast<caf::strong_actor_ptr>(whom),
           system_.message_types(whom), host, reuse);
}

std::shared_ptr<tls_context> transport_tls_of(caf::actor_system& system) {
  std::lock_guard lock(registered_tls_mutex);
  auto it = registered_tls.find(&system);
  return it == registered_tls.end() ? nullptr : it->second;
}

caf::io::middleman_actor transport_of(caf::actor_system& system) {
  if (auto a = system.registry().get<caf::io::middleman_actor>(registry_key)) return a;
  return system.middleman().actor_handle();
}

}  // namespace ap

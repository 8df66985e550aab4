#include "actors/run_node.hpp"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <iostream>
#include <memory>
#include <stdexcept>
#include <thread>

#include <caf/all.hpp>
#include <caf/io/all.hpp>

#include "actors/node.hpp"
#include "actors/scheduler_config.hpp"
#include "network/guarded_transport.hpp"
#include "tensor/compute.hpp"
#include "tensor/tensor.hpp"

namespace ap {
namespace {

// Why CAF could not listen on host:port, in words a user can act on: binds a plain socket the same way.
std::string listen_failure(const std::string& host, int port, const caf::error& e) {
  const std::string where = host + ":" + std::to_string(port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  if (int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found); rc != 0)
    return "cannot listen on " + where + ": unknown host " + host + " (" + gai_strerror(rc) + ")";
  std::unique_ptr<addrinfo, decltype(&freeaddrinfo)> guard(found, freeaddrinfo);
  const int fd = socket(found->ai_family, found->ai_socktype, found->ai_protocol);
  int error = 0;
  if (fd >= 0) {
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, found->ai_addr, found->ai_addrlen) != 0 || listen(fd, 1) != 0) error = errno;
    close(fd);
  }
  if (error == EADDRINUSE)
    return "cannot listen on " + where + ": port " + std::to_string(port) +
           " is already in use (another node?); pick another --port, or 0 for a free one";
  if (error == EADDRNOTAVAIL) return "cannot listen on " + where + ": " + host + " is not an address of this machine";
  if (error == EACCES) return "cannot listen on " + where + ": permission denied (ports below 1024 need privileges)";
  return "cannot listen on " + where + ": " + caf::to_string(e) + (error ? std::string(" (") + std::strerror(error) + ")" : "");
}

}  // namespace

namespace {

// Note [a node's shutdown]: CAF 0.17's shutdown waits for every detached actor's thread, and a processor still
// ending when the system shuts down can be held for good (seen as rare hangs of rendezvous nodes after their
// job). A job must end whatever CAF does, so a node whose shutdown takes longer than 10 s says so and exits with
// the status its caller gave.
class shutdown_watchdog {
 public:
  // From now on, at most `limit` until the destructor runs; else the process ends as `exit` says.
  void arm(node_exit exit, std::chrono::seconds limit) {
    thread_ = std::thread([this, exit = std::move(exit), limit] {
      std::unique_lock<std::mutex> lock(mutex_);
      if (done_changed_.wait_for(lock, limit, [this] { return done_; })) return;
      if (!exit.message.empty()) std::cerr << exit.message << "\n";
      std::cerr << "node: its actor system did not shut down within " << limit.count()
                << " s (CAF waits for a stage's detached actor that something still holds: Note [a node's shutdown]); "
                   "exiting with status "
                << exit.status << std::endl;
      std::_Exit(exit.status);
    });
  }
  ~shutdown_watchdog() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      done_ = true;
    }
    done_changed_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

 private:
  std::mutex mutex_;
  std::condition_variable done_changed_;
  bool done_ = false;
  std::thread thread_;
};

constexpr std::chrono::seconds shutdown_limit{10};

}  // namespace

void run_node(const node_run_options& o) {
  if (o.port < 0 || o.port > 65535) throw std::invalid_argument("--port must be 0..65535, got " + std::to_string(o.port));
  shutdown_watchdog watchdog;  // destroyed after the actor system: Note [a node's shutdown]
  check_transport_security(o.security, "node");
  if (o.security.insecure) std::cerr << insecure_warning("node") << std::endl;
  caf::actor_system_config config;
  enable_network(config);
  configure_scheduler(config);
  caf::actor_system system{config};
  const auto log = [](const std::string& line) { std::cerr << "node: " + line + "\n" << std::flush; };
  guarded_transport transport{system, o.security, transport_options{frame_limits{}, log, nullptr}};  // Note [bounded frames]
  if (o.threads < 0) throw std::invalid_argument("--threads must be 0 (automatic) or more, got " + std::to_string(o.threads));
  auto node = spawn_node(system, node_options{o.protocol_version, log, o.threads});
  // reuse_addr: a restarted node can take its old port despite TIME_WAIT; a port in use is still refused.
  auto port = transport.publish(node, static_cast<std::uint16_t>(o.port), o.host, true);
  if (!port && o.any_port_if_taken && o.port != 0) {
    log("port " + std::to_string(o.port) + " is taken: " + listen_failure(o.host, o.port, port.error()) +
        "; listening on a free one instead (a restart of this node would not find it there)");
    port = transport.publish(node, 0, o.host, true);
  }
  if (!port) {
    caf::anon_send_exit(node, caf::exit_reason::user_shutdown);
    throw std::runtime_error(listen_failure(o.host, o.port, port.error()));
  }
  std::cout << "node listening on " << o.host << ":" << *port << std::endl;  // endl: the parent waits for it
  std::cerr << "node: " << o.security.describe() << "\n" << std::flush;
  if (o.on_listening) try {
      o.on_listening(o.host, *port);
    } catch (...) {
      caf::anon_send_exit(node, caf::exit_reason::user_shutdown);  // else the system would wait for it forever
      throw;
    }
  std::thread released;
  if (o.until_released)
    released = std::thread([&o, node] {
      o.until_released();
      caf::anon_send_exit(node, caf::exit_reason::user_shutdown);
    });
  caf::scoped_actor self{system};
  self->wait_for(node);
  if (released.joinable()) {
    if (o.cancel_release) o.cancel_release();
    released.join();
  }
  watchdog.arm(o.on_stopped ? o.on_stopped() : node_exit{}, shutdown_limit);
}


int run_node(int argc, char** argv) {
  keep_tensor_memory();
  node_run_options o;
  const std::string usage = "usage: " + std::string(argc > 0 ? argv[0] : "node") +
                            " [node] [--host HOST] [--port PORT (0: a free one)] [--threads N (per rank)]"
                            " (--tls-ca CA.pem --tls-cert CERT.pem --tls-key KEY.pem | --insecure)";
  try {
    int i = 1;
    if (i < argc && std::string(argv[i]) == "node") ++i;
    for (; i < argc; ++i) {
      const std::string arg = argv[i];
      if (arg == "--help" || arg == "-h") {
        std::cout << usage << "\n";
        return 0;
      }
      if (arg == "--insecure") {
        o.security.insecure = true;
        continue;
      }
      if (i + 1 >= argc) throw std::invalid_argument("option " + arg + " needs a value");
      const std::string value = argv[++i];
      if (arg == "--host") {
        o.host = value;
      } else if (arg == "--tls-ca") {
        o.security.ca_file = value;
      } else if (arg == "--tls-cert") {
        o.security.certificate_file = value;
      } else if (arg == "--tls-key") {
        o.security.key_file = value;
      } else if (arg == "--port" || arg == "--protocol-version" || arg == "--threads") {
        std::size_t used = 0;
        long long v = -1;
        try {
          v = std::stoll(value, &used);
        } catch (const std::exception&) {
        }
        if (used != value.size() || v < 0) throw std::invalid_argument(arg + " needs a non-negative integer, got " + value);
        if (arg == "--port")
          o.port = static_cast<int>(std::min<long long>(v, 1 << 20));
        else if (arg == "--threads")
          o.threads = static_cast<int>(std::min<long long>(v, 1024));
        else
          o.protocol_version = static_cast<std::uint32_t>(v);
      } else {
        throw std::invalid_argument("unknown option " + arg + "\n" + usage);
      }
    }
    run_node(o);
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}

}  // namespace ap

// `actorpipe node`: a worker process that hosts pipeline stages for a coordinator (`actorpipe train --nodes`).
// Prints "node listening on HOST:PORT" once it accepts connections, then runs until killed or told to quit.
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <iostream>
#include <memory>

#include <caf/all.hpp>
#include <caf/io/all.hpp>

#include "actors/node.hpp"
#include "cli/commands.hpp"
#include "tensor/compute.hpp"

namespace ap::cli {
namespace {

struct node_cli_options {
  std::string host = "127.0.0.1";
  int port = 0;  // 0: the system picks a free one
  std::uint32_t protocol_version = wire_protocol_version;
};

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

void run_node(const node_cli_options& o) {
  if (o.port < 0 || o.port > 65535) throw std::invalid_argument("--port must be 0..65535, got " + std::to_string(o.port));
  set_compute_threads(1);  // one stage, one core; the node may host several stages
  caf::actor_system_config config;
  enable_network(config);
  config.set("scheduler.max-threads", 2);
  caf::actor_system system{config};
  auto node = spawn_node(system, node_options{o.protocol_version, [](const std::string& line) {
                                                std::cerr << "node: " + line + "\n" << std::flush;
                                              }});
  // reuse_addr: a restarted node can take its old port while the old connections linger in TIME_WAIT;
  // a port another process listens on is still refused.
  auto port = system.middleman().publish(node, static_cast<std::uint16_t>(o.port), o.host.c_str(), true);
  if (!port) {
    caf::anon_send_exit(node, caf::exit_reason::user_shutdown);
    throw std::runtime_error(listen_failure(o.host, o.port, port.error()));
  }
  std::cout << "node listening on " << o.host << ":" << *port << std::endl;  // endl: the parent waits for it
  caf::scoped_actor self{system};
  self->wait_for(node);
}

}  // namespace

void add_node_command(CLI::App& app) {
  auto o = std::make_shared<node_cli_options>();
  auto* cmd = app.add_subcommand("node", "run a worker process that hosts pipeline stages for `train --nodes`");
  cmd->add_option("--host", o->host, "address to listen on")->capture_default_str();
  cmd->add_option("--port", o->port, "port to listen on (0: a free one, printed on stdout)")->capture_default_str();
  cmd->add_option("--protocol-version", o->protocol_version, "claim another wire protocol version (tests)")->group("");
  cmd->callback([o] { run_node(*o); });
}

}  // namespace ap::cli

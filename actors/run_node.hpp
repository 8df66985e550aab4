// The node process's main loop, callable from any program, so a binary with extra layer kinds can host them:
//   #include "actors/run_node.hpp"
//   int main(int argc, char** argv) { return ap::run_node(argc, argv); }   // my_node --port 4242
// Prints "node listening on HOST:PORT" once it accepts connections, then runs until killed or told to quit.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "actors/handshake.hpp"
#include "network/transport_security.hpp"

namespace ap {

// How a node process ends if its actor system's shutdown does not (Note [a node's shutdown]).
struct node_exit {
  int status = 0;
  std::string message;  // printed first, if any
};

struct node_run_options {
  std::string host = "127.0.0.1";
  int port = 0;  // 0: any free one
  bool any_port_if_taken = false;  // Note [restart under a rendezvous]
  std::uint32_t protocol_version = wire_protocol_version;  // tests only
  transport_security security;  // Note [mutual TLS]
  int threads = 0;  // Note [cores on nodes]; 0: as the coordinator asks
  // When set (Note [environment rendezvous]): runs until `until_released` returns or told to quit, then calls
  // `cancel_release`.
  std::function<void(const std::string& host, std::uint16_t port)> on_listening;
  std::function<void()> until_released, cancel_release;
  // After the node stops: the exit status and line if shutdown hangs (Note [a node's shutdown]).
  std::function<node_exit()> on_stopped;
};

// Runs a node until told to quit; throws std::runtime_error / std::invalid_argument a user can act on.
void run_node(const node_run_options& options);

// The same from command-line arguments: [node] [--host HOST] [--port PORT] [--threads N] [--protocol-version V]
// (--tls-ca CA --tls-cert CERT --tls-key KEY | --insecure). Returns the exit code; errors go to stderr.
int run_node(int argc, char** argv);

}  // namespace ap

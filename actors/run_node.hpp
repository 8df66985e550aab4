// The node process's main loop, callable from any program: a user's binary that registers extra layer kinds can
// host them (a node builds layers by name; the handshake refuses a model using a kind it lacks):
//
//   #include "actors/run_node.hpp"
//   // ... the user's layer and its ap::layer_kind_registration ...
//   int main(int argc, char** argv) { return ap::run_node(argc, argv); }   // my_node --port 4242
//
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
  std::string message;  // printed on stderr first, when not empty
};

struct node_run_options {
  std::string host = "127.0.0.1";
  int port = 0;  // 0: the system picks a free one, printed on stdout
  bool any_port_if_taken = false;  // `port` in use: take a free one instead, and say so (Note [restart under a rendezvous])
  std::uint32_t protocol_version = wire_protocol_version;  // another one only to test the refusal
  transport_security security;  // mutual TLS files, or insecure (Note [mutual TLS]); checked before listening
  int threads = 0;  // intra-op threads of every rank it hosts (Note [cores on nodes]); 0: as the coordinator asks,
                    // else this machine's cores divided among them
  // When set (Note [environment rendezvous]), the node says where it listens, then runs until `until_released`
  // returns or it is told to quit, after which `cancel_release` makes `until_released` return.
  std::function<void(const std::string& host, std::uint16_t port)> on_listening;
  std::function<void()> until_released, cancel_release;
  // Called once the node has stopped, before its actor system shuts down; returns the exit status and line to print
  // should that shutdown hang (absent: 0, none) (Note [a node's shutdown]).
  std::function<node_exit()> on_stopped;
};

// Runs a node until it is told to quit; throws std::runtime_error / std::invalid_argument with a text a user can
// act on.
void run_node(const node_run_options& options);

// The same from command-line arguments: [node] [--host HOST] [--port PORT] [--threads N] [--protocol-version V]
// (--tls-ca CA --tls-cert CERT --tls-key KEY | --insecure), the leading word "node" optional. Returns the process exit code; errors go to stderr.
int run_node(int argc, char** argv);

}  // namespace ap

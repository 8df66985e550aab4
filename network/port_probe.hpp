// Is anything listening on host:port? Tells a killed node (the kernel refuses connections to its port) from a
// stopped or frozen one (SIGSTOP: the kernel still accepts connections on its listening socket, nobody answers).
// Both look the same to CAF: the connection is lost (remote_link_unreachable), after a hang-up or after the
// heartbeats stopped.
#pragma once

#include <chrono>
#include <string>

namespace ap {

enum class port_state { listening, refused, unknown };  // unknown: no answer within the limit, or no address

// Opens and closes one TCP connection (numeric or resolvable host), waiting at most `limit`.
port_state probe_port(const std::string& host, int port, std::chrono::milliseconds limit);

// The end of "stage 1 on node H:P ...": what a lost connection to a node means, given its port's state.
// listening: " stopped answering heartbeats (...; its port still accepts connections: the process is alive but
// stopped, frozen or overloaded)"; refused: " is gone (...; nothing listens on its port: the process died or was
// killed)"; unknown: " is gone (lost the connection: <reason>)".
std::string lost_connection_text(port_state port, const std::string& reason);

}  // namespace ap

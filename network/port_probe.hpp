// Is anything listening on host:port? Tells a killed node (connections refused) from a stopped or frozen one (the
// kernel still accepts), which look the same to CAF: a lost connection.
#pragma once

#include <chrono>
#include <string>

namespace ap {

enum class port_state { listening, refused, unknown };  // unknown: no answer within the limit, or no address

// Opens and closes one TCP connection, waiting at most `limit`.
port_state probe_port(const std::string& host, int port, std::chrono::milliseconds limit);

// The end of "stage 1 on node H:P ...": what a lost connection to a node means, given its port's state.
std::string lost_connection_text(port_state port, const std::string& reason);

}  // namespace ap

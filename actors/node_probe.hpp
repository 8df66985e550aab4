// What `train --auto --nodes` plans with (Note [auto on nodes]): each node's machine, and what a message between
// two processes costs over CAF and over a data link.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "network/transport_security.hpp"

namespace ap {

struct node_machine {
  std::string address;  // as given: "host:port"
  std::string host;     // nodes with the same host share a machine (Note [cores on nodes])
  int cores = 1;        // its machine's, as the node's process sees them
  int threads = 0;      // fixed by `actorpipe node --threads` (0: as the coordinator asks)
};

// One message of `bytes` from one process to another: latency + bytes x per_byte.
struct network_line {
  double latency_s = 0.0, per_byte_s = 0.0;
  double seconds(std::uint64_t bytes) const { return latency_s + per_byte_s * static_cast<double>(bytes); }
};

struct node_survey {
  std::vector<node_machine> nodes;  // in the order given
  network_line network;             // a CAF message
  network_line links;               // a tensor on a data link (Note [data links]), through its socket
  // A tensor copied out of the sender's memory on one machine (Note [one copy on one machine]); timed only where
  // the first node shares this process's address.
  std::optional<network_line> copies;
};

// Connects to every node over `security`, asks each for its machine, and times tensor round trips to the first,
// in a CAF message and on a data link: each line from half the fastest of 5 round trips at 64 KiB and 4 MiB.
// Where the link's ends share an address, also times a copy out of this process's memory (`copies`). Every wait
// is bounded by `timeout`; failure throws std::runtime_error naming the node, a bad address
// std::invalid_argument.
node_survey survey_nodes(const std::vector<std::string>& nodes, const transport_security& security,
                         std::chrono::milliseconds timeout);

// The nodes that answer within `timeout` each (connection, handshake, machine question), in order; others are
// left out. What an elastic run continues on (Note [elastic runs]). A bad address throws std::invalid_argument.
std::vector<std::string> nodes_answering(const std::vector<std::string>& nodes, const transport_security& security,
                                         std::chrono::milliseconds timeout);

}  // namespace ap

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
  std::string host;     // Note [cores on nodes]
  int cores = 1;      
  int threads = 0;      // 0: as asked
};

// One message of `bytes` from one process to another: latency + bytes x per_byte.
struct network_line {
  double latency_s = 0.0, per_byte_s = 0.0;
  double seconds(std::uint64_t bytes) const { return latency_s + per_byte_s * static_cast<double>(bytes); }
};

struct node_survey {
  std::vector<node_machine> nodes;  // in the order given
  network_line network;             // a CAF message
  network_line links;               // Note [data links]
  // A tensor copied out of the sender's memory on one machine (Note [one copy on one machine]); timed only where
  // the first node shares this process's address.
  std::optional<network_line> copies;
};

// Asks every node for its machine and times tensor round trips to the first (CAF message, data link, and a
// same-machine copy where possible). Waits are bounded by `timeout`; failure throws std::runtime_error naming
// the node, a bad address std::invalid_argument.
node_survey survey_nodes(const std::vector<std::string>& nodes, const transport_security& security,
                         std::chrono::milliseconds timeout);

// The nodes that answer within `timeout` each, in order (Note [elastic runs]); a bad address throws
// std::invalid_argument.
std::vector<std::string> nodes_answering(const std::vector<std::string>& nodes, const transport_security& security,
                                         std::chrono::milliseconds timeout);

}  // namespace ap

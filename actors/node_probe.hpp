// What `train --auto --nodes` plans with (Note [auto on nodes] in plan/auto_config.hpp): each node's machine as
// the node reports it, and what a message between two processes costs, timed over CAF's connection to the node
// and over a data link to it (which activations of 64 KB or more and the replicas' rings take).
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
  // A tensor between two processes of one machine, copied out of its sender's memory (Note [one copy on one
  // machine]): timed where the first node shares this process's address and may read its memory; else none.
  std::optional<network_line> copies;
};

// Connects to every node (the handshake included) over `security`, asks each for its machine (machine_atom),
// and times round trips of a tensor to the first: in a CAF message (echo_atom), and on a data link the node
// opens for it (link_echo_atom, TLS as the transport is). Half a round trip at 64 KiB and at 4 MiB, each the
// fastest of 5 after one, gives each line. Where that link's ends have one address, the node also copies the
// tensor out of this process's memory, and the time from the offer to its answer, less half a 1-byte round
// trip, gives `copies`. Every wait is bounded by `timeout`; a failure throws
// std::runtime_error naming the node, a bad address std::invalid_argument.
node_survey survey_nodes(const std::vector<std::string>& nodes, const transport_security& security,
                         std::chrono::milliseconds timeout);

// The nodes of `nodes` that answer within `timeout` each (the connection, the handshake and a question about their
// machine), in the order given; one that refuses, fails or stays silent is left out. What an elastic run continues
// on (Note [elastic runs] in engine/elastic_run.cpp). A bad address throws std::invalid_argument.
std::vector<std::string> nodes_answering(const std::vector<std::string>& nodes, const transport_security& security,
                                         std::chrono::milliseconds timeout);

}  // namespace ap

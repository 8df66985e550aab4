// A node: the actor a worker process (`actorpipe node`) publishes. It hosts pipeline stages (the same retriever,
// processor and sender as in one process, spawned from a stage_spec), used through remote handles exactly like
// local ones. The protocol, in this order:
//
//   (hello_atom, version, little_endian, type names, layer kinds) -> the node's own, or an error saying what differs
//   (peers_atom, ["host:port", ...], timeout_ms)      -> ok_atom once connected to each of them
//   stage_spec                                        -> (retriever, processor, sender, link port) of the stage
//   machine_atom                                      -> (its machine's cores, its --threads or 0)
//   (echo_atom, tensor_message)                       -> the same tensor_message (Note [auto on nodes])
//   (link_echo_atom, host, timeout_ms)                -> the port of a data link on host that echoes frames (the same)
//   quit_atom                                         -> stops every stage, then the node
//
// The node monitors whoever placed a stage and stops that owner's stages when it goes, so a dead coordinator
// leaves nothing running; the node itself lives on.

// Note [direct routes between nodes]: unless nodes A and B are connected, CAF 0.17 routes stage-to-stage messages
// between them through the coordinator's process: twice the traffic, and the coordinator's death would cut them
// apart. So before placing stages the coordinator tells node i to connect to the nodes before it.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <caf/all.hpp>

#include "network/error_text.hpp"
#include "actors/handshake.hpp"
#include "actors/stage_spawner.hpp"
#include "network/node_address.hpp"

namespace ap {

using peers_atom = caf::atom_constant<caf::atom("peers")>;
using quit_atom = caf::atom_constant<caf::atom("quit")>;


// Note [heartbeats]: CAF 0.17 sends none by default, so a peer that stops answering without closing its
// connection (frozen process, pulled cable) would go unnoticed; a dead process closes its sockets and is seen at
// once. One heartbeat per second; a connection silent for 5 s is closed (a down_msg for every actor behind it).
inline constexpr std::chrono::seconds heartbeat_interval{1};
inline constexpr std::chrono::seconds connection_timeout{5};

// Loads the middleman, registers every message type and turns heartbeats on. Call before the actor_system is
// built, in coordinators and nodes alike; then start a guarded_transport (network/guarded_transport.hpp).
void enable_network(caf::actor_system_config& config);

struct node_options {
  std::uint32_t protocol_version = wire_protocol_version;  // another one only to test the refusal
  std::function<void(const std::string&)> log;             // one line per event; may be empty
  int threads = 0;  // intra-op threads of every rank it hosts (Note [cores on nodes]); 0: as the coordinator asks
};
caf::actor spawn_node(caf::actor_system& system, node_options options);

// ---- the coordinator's side --------------------------------------------------------------------------
// Blocking calls on `self` (the pipeline's owner actor). Every wait is bounded by `timeout`; a failure throws
// std::runtime_error naming the node's address and what went wrong.

// Connects and runs the handshake; returns the node actor and, when given, its buildable layer kinds.
caf::actor connect_node(caf::scoped_actor& self, const node_address& address, std::chrono::milliseconds timeout,
                        std::vector<std::string>* node_layer_kinds = nullptr);
// Has `node` connect to `peers` (Note [direct routes between nodes]).
void connect_peers(caf::scoped_actor& self, const caf::actor& node, const node_address& address,
                   const std::vector<node_address>& peers, std::chrono::milliseconds timeout);
// The node's steady clock minus ours, from the fastest of `rounds` round trips (node's reading minus our
// midpoint); true within +-bound_us, half that round trip (Note [events from nodes]).
struct clock_offset {
  double offset_us = 0.0, bound_us = 0.0;
};
clock_offset estimate_clock_offset(caf::scoped_actor& self, const caf::actor& node, const node_address& address,
                                   std::chrono::milliseconds timeout, int rounds = 5);
// Spawns one stage on `node`.
stage_actors place_stage(caf::scoped_actor& self, const caf::actor& node, const node_address& address, stage_spec spec,
                         std::chrono::milliseconds timeout);

// A failed wait on a node in words, telling our limit passing ("no answer within 30000 ms (waited 30.0 s)") from
// CAF's shorter connection timeout on a silent peer. `waited_s`: seconds since the request was sent.
std::string wait_failure_text(const caf::error& e, std::chrono::milliseconds timeout, double waited_s);
// The same for a request sent at `sent`.
std::string wait_failure(const caf::error& e, std::chrono::milliseconds timeout,
                         std::chrono::steady_clock::time_point sent);

}  // namespace ap

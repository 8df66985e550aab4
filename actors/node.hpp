// A node: the actor a worker process (`actorpipe node`) publishes. It hosts pipeline stages spawned from a
// stage_spec, used through remote handles like local ones. The protocol, in order: hello_atom (handshake),
// peers_atom (connect to peers), stage_spec (-> the stage's actors and link port), machine_atom (-> cores,
// --threads), echo_atom and link_echo_atom (Note [auto on nodes]), quit_atom. It stops a placer's stages when the
// placer goes, so a dead coordinator leaves nothing running; the node lives on.

// Note [direct routes between nodes]: unconnected nodes' messages would route through the coordinator's process
// (CAF 0.17): twice the traffic, and its death would cut them apart. So node i first connects to the nodes
// before it.
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
// connection would go unnoticed. One heartbeat a second; a connection silent for 5 s is closed.
inline constexpr std::chrono::seconds heartbeat_interval{1};
inline constexpr std::chrono::seconds connection_timeout{5};

// Loads the middleman, registers every message type and turns heartbeats on; call before the actor_system is
// built, then start a guarded_transport.
void enable_network(caf::actor_system_config& config);

struct node_options {
  std::uint32_t protocol_version = wire_protocol_version;  // tests only
  std::function<void(const std::string&)> log;  // may be empty
  int threads = 0;  // Note [cores on nodes]; 0: as asked
};
caf::actor spawn_node(caf::actor_system& system, node_options options);

// ---- the coordinator's side --------------------------------------------------------------------------
// Blocking calls on `self` (the pipeline's owner actor), each bounded by `timeout`; a failure throws
// std::runtime_error naming the node.

// Connects and runs the handshake; returns the node actor and, when given, its buildable layer kinds.
caf::actor connect_node(caf::scoped_actor& self, const node_address& address, std::chrono::milliseconds timeout,
                        std::vector<std::string>* node_layer_kinds = nullptr);
// Has `node` connect to `peers` (Note [direct routes between nodes]).
void connect_peers(caf::scoped_actor& self, const caf::actor& node, const node_address& address,
                   const std::vector<node_address>& peers, std::chrono::milliseconds timeout);
// The node's steady clock minus ours from the fastest of `rounds` round trips, true within +-bound_us
// (Note [events from nodes]).
struct clock_offset {
  double offset_us = 0.0, bound_us = 0.0;
};
clock_offset estimate_clock_offset(caf::scoped_actor& self, const caf::actor& node, const node_address& address,
                                   std::chrono::milliseconds timeout, int rounds = 5);
// Spawns one stage on `node`.
stage_actors place_stage(caf::scoped_actor& self, const caf::actor& node, const node_address& address, stage_spec spec,
                         std::chrono::milliseconds timeout);

// A failed wait on a node in words, telling our limit from CAF's shorter connection timeout.
std::string wait_failure_text(const caf::error& e, std::chrono::milliseconds timeout, double waited_s);
// The same for a request sent at `sent`.
std::string wait_failure(const caf::error& e, std::chrono::milliseconds timeout,
                         std::chrono::steady_clock::time_point sent);

}  // namespace ap

// The handshake between a coordinator and a node, before any stage is placed. Both sides must speak the
// same wire protocol version, store floats little-endian (tensors travel as raw bytes, network/wire_format.hpp)
// and register the same message types under the same names. A mismatch is refused on both sides with a
// text saying what differs. Each side also names the layer kinds it can build (layer_registry.hpp): they
// may differ, but a model using a kind a node lacks is refused before any stage is placed
// (layer_kinds_lacking), naming the kind and the node.
//
// On the wire: (hello_atom, version, little_endian, message type names, layer kinds) and the same back. It
// uses only CAF built-in types, so it is understood even by a peer whose registered types differ.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <caf/atom.hpp>

namespace ap {

// Bump whenever a message type, its fields or the protocol between coordinator and node changes.
// 2: tensors carry their dtype, the hello names the layer kinds, run_* and deliver_* messages replace
// (int, task) pairs, stage specs carry their actions as fields.
// 3: stage specs carry the compute dtype; stage_done, task_done and step_result the peak stash bytes.
// 4: stage_done carries the stage's events, stage specs ask for them (report_events), nodes answer a clock
//    probe (clock_atom); ring_chunk and ring_abort (collective groups across processes).
// 6: task_done, stage_failed, step_result and gradient_norm carry an error_code (Note [errors as codes]).
// 8: stage specs carry the collective backend of their data-parallel groups (Note [collective backends]).
// 9: stage specs carry the replica's place among those sharing its node, and the placement's key (Note
//    [hierarchical collectives]); a third backend, by-size (Note [collectives by size]).
// 10: ring chunks travel on data links beside CAF (Note [data links]): no ring_chunk message; the ring's hello
//     carries each side's link port.
// 11: nodes answer machine_atom (their machine's cores and fixed threads) and echo_atom (a tensor_message back),
//     which --auto plans with (Note [auto on nodes]); activations travel on data links (Note [activations on data
//     links]): tasks carry a ticket, stage specs a link host, a placed stage answers its link port, a sender's
//     setup names every rank's link.
// 12: nodes answer link_echo_atom with the port of a data link that echoes, which --auto times the activation
//     links with (Note [auto on nodes]).
// 13: a TLS data link's bytes travel in records of the link's own, sealed with keys exported from its TLS session
//     (Note [sealed records]), not in TLS records; an activation's frame says where its bytes are, and between two
//     ends of one address offers them in the sender's memory (Note [one copy on one machine]); a ring's links agree
//     as they open whether chunks are copied in place (Note [one copy in the ring]).
// 14: after a link's first copied offer, an outbox no longer waits for answers, and an inbox that cannot copy a
//     later offer ends the link (Note [offers without waiting]).
// 15: a stage_spec carries the stage's options and place, each as one struct (Note [stage options]), the
//     optimizer's lr schedule among them (Note [lr from the optimizer's steps]).
// 17: plain TCP (--insecure) carries every byte, on data links and under CAF's messages, in checked records with a
//     CRC32C (Note [checked records]).
inline constexpr std::uint32_t wire_protocol_version = 17;

using hello_atom = caf::atom_constant<caf::atom("hello")>;

struct handshake {
  std::uint32_t version = wire_protocol_version;
  bool little_endian = true;
  std::vector<std::string> message_types;
  std::vector<std::string> layer_kinds;  // registered_layer_kinds() of that process
};

bool host_is_little_endian();

// This process's side, with `version` (the node command can claim another one, for tests).
handshake local_handshake(std::uint32_t version = wire_protocol_version);

// Empty when `mine` and `theirs` can talk; otherwise what differs, with `me` and `them` naming the sides:
// "protocol version mismatch: the coordinator speaks version 1, node 127.0.0.1:4242 version 2".
std::string handshake_mismatch(const handshake& mine, const handshake& theirs, const std::string& me,
                               const std::string& them);

// The kinds in `used` (layer_kinds_in of a model's specs) missing from `known`, in the order of `used`.
std::vector<std::string> layer_kinds_lacking(const std::vector<std::string>& used, const std::vector<std::string>& known);

}  // namespace ap

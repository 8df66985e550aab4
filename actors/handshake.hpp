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

// Bump whenever a message type, its fields or the protocol between coordinator and node changes (what each
// version changed is in git's history of this line). 17: a forward task carries its microbatch's labels and the
// batch's rows for a last stage that computes the loss (Note [loss in the last stage]). 18: a stage's options
// say whether it divides rows (Note [sequence parallelism]).
inline constexpr std::uint32_t wire_protocol_version = 18;

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

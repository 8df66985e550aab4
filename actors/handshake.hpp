// The handshake between a coordinator and a node: both must speak the same protocol version, be little-endian
// and register the same message types, else both refuse saying what differs. A model using a layer kind a node
// lacks is refused (layer_kinds_lacking). Uses CAF built-in types only, so any peer understands it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <caf/atom.hpp>

namespace ap {

// Bump whenever a message type, its fields or the protocol between coordinator and node changes (git's history
// of this line says what each version changed).
inline constexpr std::uint32_t wire_protocol_version = 19;

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

// Empty when `mine` and `theirs` can talk; otherwise what differs, e.g. "protocol version mismatch: the
// coordinator speaks version 1, node 127.0.0.1:4242 version 2".
std::string handshake_mismatch(const handshake& mine, const handshake& theirs, const std::string& me,
                               const std::string& them);

// The kinds in `used` (layer_kinds_in of a model's specs) missing from `known`, in the order of `used`.
std::vector<std::string> layer_kinds_lacking(const std::vector<std::string>& used, const std::vector<std::string>& known);

}  // namespace ap

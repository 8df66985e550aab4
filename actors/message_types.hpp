// Every message type that may cross a process boundary, registered under the same name on every side (CAF 0.17
// delivers an unregistered type as an empty message).
#pragma once

#include <string>
#include <vector>

namespace caf {
class actor_system_config;
}

namespace ap {

// Registers every message type of the runtime with add_message_type. Coordinators and nodes both call it.
void add_message_types(caf::actor_system_config& config);

// The names registered by add_message_types, in registration order: part of the handshake (handshake.hpp).
std::vector<std::string> message_type_names();

}  // namespace ap

// The flags of `node` and `train --nodes` that choose the transport: --tls-ca, --tls-cert, --tls-key (mutual
// TLS, Note [mutual TLS]) or --insecure (plain TCP). One place, so both commands spell and explain them alike.
#pragma once

#include <vector>

#include <CLI/CLI.hpp>

#include "network/transport_security.hpp"

namespace ap::cli {

// Adds the four flags to `cmd`, writing into `s`; returns them (train refuses them without --nodes).
std::vector<CLI::Option*> add_transport_flags(CLI::App* cmd, transport_security& s);

}  // namespace ap::cli

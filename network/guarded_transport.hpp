// The transport coordinators and nodes connect and listen through: CAF 0.17's middleman actor with our own
// connections (mutual TLS through network/tls_session.hpp, or plain TCP in checked records: Note [checked
// records]) that bound what a peer can make us allocate, and log the connections they drop.
//
// Note [bounded frames]: CAF's BASP layer sizes its read buffer to whatever a frame header claims, so one crafted
// header claiming 4 GB makes a node allocate 4 GB; CAF 0.17 has no setting for this (basp_broker calls
// configure_read(exactly(hdr.payload_len)) unchecked). Our connection refuses a read above its limit before any
// buffer grows: first_frame_bytes for the first frame (the peer's handshake), frame_bytes after; a refused
// connection is logged and shut down, which CAF sees as closed. The limits hold on --insecure plain TCP too.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include <caf/actor_system.hpp>
#include <caf/expected.hpp>
#include <caf/io/middleman_actor.hpp>

#include "network/transport_security.hpp"

namespace ap {

struct frame_limits {
  std::size_t first_frame_bytes = std::size_t{64} << 10;  // a handshake: node id, app id, interface names
  std::size_t frame_bytes = std::size_t{1} << 30;         // a stage_spec or a stage's state (weights, Adam moments)
};

class tls_context;

struct transport_options {
  frame_limits limits;
  std::function<void(const std::string&)> log;  // one line per dropped connection; may be empty; any thread
  std::shared_ptr<tls_context> tls;             // set by guarded_transport from its transport_security
  // Registered for transport_of (the process's one transport). A ring_group's own is not, so it neither replaces
  // nor unregisters the process's.
  bool registered = true;
};

// Spawns the transport in `system` (mutual TLS unless security.insecure: Note [mutual TLS]), registers it for
// transport_of, and stops it in the destructor: destroy it before the actor_system. Throws
// std::invalid_argument for bad TLS files (check_transport_security first for the flags' texts).
class guarded_transport {
 public:
  guarded_transport(caf::actor_system& system, const transport_security& security, transport_options options);
  ~guarded_transport();
  guarded_transport(const guarded_transport&) = delete;
  guarded_transport& operator=(const guarded_transport&) = delete;

  // Publishes `whom` on host:port (0: a free one); the bound port, or CAF's error.
  caf::expected<std::uint16_t> publish(const caf::actor& whom, std::uint16_t port, const std::string& host, bool reuse);
  // The middleman actor to connect through (connect_atom), as transport_of gives for a registered one.
  const caf::io::middleman_actor& actor() const { return actor_; }
  // Its TLS context, also the data links' (Note [data links]); null for plain TCP.
  const std::shared_ptr<tls_context>& tls() const { return tls_; }

 private:
  caf::actor_system& system_;
  caf::io::middleman_actor actor_;
  std::shared_ptr<tls_context> tls_;
  bool registered_ = true;
};

// The middleman actor to connect through (connect_atom): the guarded transport when one runs in `system`,
// else the plain middleman's (in-process tests that never listen).
caf::io::middleman_actor transport_of(caf::actor_system& system);
// The TLS context of the guarded transport registered in `system`; null for plain TCP or none registered.
std::shared_ptr<tls_context> transport_tls_of(caf::actor_system& system);

}  // namespace ap

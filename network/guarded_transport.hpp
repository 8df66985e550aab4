// The transport coordinators and nodes connect through: CAF 0.17's middleman actor with our own connections (mutual
// TLS, or plain TCP in checked records) that bound what a peer can make us allocate and log what they drop.
//
// Note [bounded frames]: CAF 0.17's BASP layer sizes its read buffer to whatever a frame header claims (no setting
// limits it), so one crafted header could make a node allocate 4 GB. Our connection refuses a read above its limit
// before any buffer grows (first_frame_bytes for the handshake, frame_bytes after), logs it and shuts down.
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
  std::size_t first_frame_bytes = std::size_t{64} << 10;  // a handshake
  std::size_t frame_bytes = std::size_t{1} << 30;         // a stage's state (weights, Adam moments)
};

class tls_context;

struct transport_options {
  frame_limits limits;
  std::function<void(const std::string&)> log;  // one line per dropped connection; may be empty; any thread
  std::shared_ptr<tls_context> tls;             // set by guarded_transport
  // Registered for transport_of; a ring_group's own is not, so it leaves the process's alone.
  bool registered = true;
};

// Spawns the transport in `system` (Note [mutual TLS]) and stops it in the destructor: destroy it before the
// actor_system. Throws std::invalid_argument for bad TLS files.
class guarded_transport {
 public:
  guarded_transport(caf::actor_system& system, const transport_security& security, transport_options options);
  ~guarded_transport();
  guarded_transport(const guarded_transport&) = delete;
  guarded_transport& operator=(const guarded_transport&) = delete;

  // Publishes `whom` on host:port (0: a free one); the bound port, or CAF's error.
  caf::expected<std::uint16_t> publish(const caf::actor& whom, std::uint16_t port, const std::string& host, bool reuse);
  const caf::io::middleman_actor& actor() const { return actor_; }
  // Its TLS context, also the data links' (Note [data links]); null for plain TCP.
  const std::shared_ptr<tls_context>& tls() const { return tls_; }

 private:
  caf::actor_system& system_;
  caf::io::middleman_actor actor_;
  std::shared_ptr<tls_context> tls_;
  bool registered_ = true;
};

// The middleman actor to connect through: the registered guarded transport, else the plain middleman.
caf::io::middleman_actor transport_of(caf::actor_system& system);
// Null for plain TCP or none registered.
std::shared_ptr<tls_context> transport_tls_of(caf::actor_system& system);

}  // namespace ap

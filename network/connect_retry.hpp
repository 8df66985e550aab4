// When a connection attempt that failed is tried again.
//
// Note [a fresh connection's first heartbeat]: CAF 0.17.6's BASP broker creates the context of an outgoing
// connection with `ctx[hdl]` (basp_broker.cpp, connect_atom), leaving its `last_seen` at the clock's epoch;
// only data read from the peer sets it. With heartbeats on, the broker's next tick (every
// heartbeat_interval, 1 s here) finds `last_seen + connection-timeout < now` and drops the connection with
// sec::connection_timeout if the peer's handshake has not arrived yet. On a loaded machine a TLS handshake
// takes long enough for that to happen (CI saw it: "cannot connect to its peer node ...: connection_timeout"
// 3 s into a test). The error then says nothing about the peer, so every connect tries again while its own
// limit lasts; a peer that is truly silent still fails, at that limit.
#pragma once

#include <chrono>

#include <caf/error.hpp>
#include <caf/sec.hpp>

namespace ap {

// Whether a connect that failed with `e` is tried again: only CAF's spurious connection_timeout, and only
// while `now` is before the caller's `deadline`.
inline bool retry_connect(const caf::error& e, std::chrono::steady_clock::time_point now,
                          std::chrono::steady_clock::time_point deadline) {
  return e == caf::sec::connection_timeout && now < deadline;
}

}  // namespace ap

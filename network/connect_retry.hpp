// When a connection attempt that failed is tried again.
//
// Note [a fresh connection's first heartbeat]: CAF 0.17.6's BASP broker leaves a new outgoing connection's
// `last_seen` at the clock's epoch until the peer's data arrives, so with heartbeats on its next tick drops the
// connection with sec::connection_timeout when a slow (loaded, TLS) handshake has not finished. That error says
// nothing about the peer, so every connect tries again while its own limit lasts.
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

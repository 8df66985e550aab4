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
//
// Note [a hang-up during the handshake]: sec::disconnect_during_handshake (the peer hung up before CAF's
// handshake) is what transports that disagree (TLS against plain TCP) give on every attempt. Under load a
// connection between two nodes can also end so once, with nothing wrong (a ring's connect, 1 in 6 with two
// busy loops beside it on 2 vCPUs). So it is tried again, a few times, before it is reported as a disagreement.
#pragma once

#include <chrono>

#include <caf/error.hpp>
#include <caf/sec.hpp>

namespace ap {

inline constexpr int handshake_hangups_tried = 3;

// Whether a connect that failed with `e` is tried again, while `now` is before the caller's `deadline`: CAF's
// spurious connection_timeout always; a hang-up during the handshake while `hangups` (counted here, per connect)
// stays under handshake_hangups_tried.
inline bool retry_connect(const caf::error& e, std::chrono::steady_clock::time_point now,
                          std::chrono::steady_clock::time_point deadline, int* hangups = nullptr) {
  if (now >= deadline) return false;
  if (e == caf::sec::connection_timeout) return true;
  return hangups && e == caf::sec::disconnect_during_handshake && ++*hangups < handshake_hangups_tried;
}

}  // namespace ap

// A data link that sends back every frame it gets, for timing activation links (Note [auto on nodes]).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "network/data_link.hpp"
#include "network/process_memory.hpp"

namespace ap {

// The hello a timing link opens with.
inline const std::string link_echo_hello = "actorpipe link echo";
// The largest frame an echo takes (a frame's 8-byte size beyond it ends the echo).
inline constexpr std::uint64_t link_echo_max_bytes = std::uint64_t{64} << 20;

// Listens on `host` and returns the port; a thread then takes one connection saying link_echo_hello within
// `timeout`, writes it a memory token (Note [one copy on one machine]), and serves frames until the peer hangs up,
// a frame is empty or too large, or `timeout` passes idle. A frame is an 8-byte size and the bytes, sent back; with
// the size's top bit set, a process_region to copy from the peer, answered with 1 when every byte came. Throws
// link_error when it cannot listen.
std::uint16_t start_link_echo(const std::string& host, std::shared_ptr<tls_context> tls, std::chrono::milliseconds timeout);

// One round trip of `frame` on an echo's `link`, read back into `back`. Throws link_error.
void link_echo_round_trip(data_link& link, const std::vector<char>& frame, std::vector<char>& back,
                          std::chrono::milliseconds timeout);

// Whether the echo copied `frame` out of this process's memory when offered. Throws link_error.
bool link_echo_copy(data_link& link, const memory_token& token, const std::vector<char>& frame,
                    std::chrono::milliseconds timeout);

}  // namespace ap

// A data link that sends back every frame it gets: what `train --auto --nodes` times the activation links with
// (Note [auto on nodes] in plan/auto_config.hpp). A node opens one when its coordinator asks (link_echo_atom).
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

// One round trip of `frame` (at most link_echo_max_bytes) on `link`, which an echo serves; what comes back is
// read into `back` (resized to the frame's size). Throws link_error.
void link_echo_round_trip(data_link& link, const std::vector<char>& frame, std::vector<char>& back,
                          std::chrono::milliseconds timeout);

// `frame` offered where it lies to the echo on `link`, whose token (written as the link opened) is `token`:
// whether the echo copied it out of this process's memory. Throws link_error.
bool link_echo_copy(data_link& link, const memory_token& token, const std::vector<char>& frame,
                    std::chrono::milliseconds timeout);

}  // namespace ap

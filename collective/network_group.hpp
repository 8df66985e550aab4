// A process_group whose ranks live in different processes or machines: each rank hands its endpoint() (a text)
// to whoever gathers them (the coordinator) and connects with every rank's (Note [collective backends]).
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "collective/colocation.hpp"
#include "collective/process_group.hpp"

namespace caf {
class actor_system;
}

namespace ap {

class network_group : public process_group {
 public:
  // What the other ranks need to reach this one (ring: "host:port"; gloo: its sockets' addresses in hex).
  virtual std::string endpoint() const = 0;
  // Connects to every other rank (`endpoints` by rank) within the timeout. Throws collective_error naming the rank.
  virtual void connect(const std::vector<std::string>& endpoints) = 0;
};

// Note [collective backends]: ring (ours, Note [ring collectives]; plain TCP or mutual TLS; the default, faster than
// gloo at almost every size: docs/performance.md); gloo (Note [gloo backend]; no TLS in Debian's build, so
// `--insecure` only); by_size (the ring below 4 MB, gloo from 4 MB, Note [collectives by size]; plain TCP only).
enum class collective_backend : std::uint8_t { ring = 0, gloo = 1, by_size = 2 };
const char* collective_backend_name(collective_backend backend);
// The name, and for by-size where it splits (what `train` prints).
std::string describe_collective_backend(collective_backend backend);
// "ring", "gloo" or "by-size"; nothing for any other text.
std::optional<collective_backend> parse_collective_backend(const std::string& text);
// Whether the backend runs gloo, which has no TLS.
bool needs_plain_tcp(collective_backend backend);
// The backend a job gets unless it names one: the ring.
collective_backend default_collective_backend();

// A member of a group across processes, listening on `host`. Throws collective_error when it cannot listen.
std::unique_ptr<network_group> make_network_group(collective_backend backend, caf::actor_system& system,
                                                  std::string name, int rank, int size, const std::string& host,
                                                  std::chrono::milliseconds timeout);

// A member of a group whose ranks may share processes (`place` from colocate()): a hierarchical_group where some
// process holds several ranks (Note [hierarchical collectives]; `process_key` names this placement in this
// process), else the backend's group itself.
std::unique_ptr<network_group> make_network_group(collective_backend backend, caf::actor_system& system,
                                                  std::string name, int rank, int size, const colocated_rank& place,
                                                  const std::string& process_key, const std::string& host,
                                                  std::chrono::milliseconds timeout);

}  // namespace ap

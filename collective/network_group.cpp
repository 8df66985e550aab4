#include "collective/network_group.hpp"

#include "collective/by_size_group.hpp"
#include "collective/gloo_group.hpp"
#include "collective/hierarchical_group.hpp"
#include "collective/ring_group.hpp"

namespace ap {

const char* collective_backend_name(collective_backend backend) {
  switch (backend) {
    case collective_backend::gloo: return "gloo";
    case collective_backend::by_size: return "by-size";
    case collective_backend::ring: break;
  }
  return "ring";
}

std::string describe_collective_backend(collective_backend backend) {
  if (backend != collective_backend::by_size) return collective_backend_name(backend);
  const std::string mb = std::to_string(by_size_group::default_threshold_bytes >> 20) + " MB";
  return std::string(collective_backend_name(backend)) + ": the ring below " + mb + ", gloo from " + mb;
}

std::optional<collective_backend> parse_collective_backend(const std::string& text) {
  for (collective_backend b : {collective_backend::ring, collective_backend::gloo, collective_backend::by_size})
    if (text == collective_backend_name(b)) return b;
  return std::nullopt;
}

bool needs_plain_tcp(collective_backend backend) { return backend != collective_backend::ring; }

collective_backend default_collective_backend() { return collective_backend::ring; }

std::unique_ptr<network_group> make_network_group(collective_backend backend, caf::actor_system& system,
                                                  std::string name, int rank, int size, const std::string& host,
                                                  std::chrono::milliseconds timeout) {
  if (backend == collective_backend::gloo) return std::make_unique<gloo_group>(std::move(name), rank, size, host, timeout);
  if (backend == collective_backend::by_size)
    return std::make_unique<by_size_group>(
        make_network_group(collective_backend::ring, system, name, rank, size, host, timeout),
        make_network_group(collective_backend::gloo, system, name, rank, size, host, timeout));
  return std::make_unique<ring_group>(system, std::move(name), rank, size, node_address{host, 0}, timeout);
}

std::unique_ptr<network_group> make_network_group(collective_backend backend, caf::actor_system& system,
                                                  std::string name, int rank, int size, const colocated_rank& place,
                                                  const std::string& process_key, const std::string& host,
                                                  std::chrono::milliseconds timeout) {
  if (place.processes >= size) return make_network_group(backend, system, std::move(name), rank, size, host, timeout);
  std::unique_ptr<network_group> inner;
  if (place.local_rank == 0 && place.processes > 1)
    inner = make_network_group(backend, system, name, place.process, place.processes, host, timeout);
  return std::make_unique<hierarchical_group>(std::move(name), rank, size, place, process_key, std::move(inner), timeout);
}

}  // namespace ap

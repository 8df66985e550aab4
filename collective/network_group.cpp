#include "collective/network_group.hpp"

#include "collective/gloo_group.hpp"
#include "collective/hierarchical_group.hpp"
#include "collective/ring_group.hpp"

namespace ap {

const char* collective_backend_name(collective_backend backend) {
  return backend == collective_backend::gloo ? "gloo" : "ring";
}

std::optional<collective_backend> parse_collective_backend(const std::string& text) {
  if (text == "ring") return collective_backend::ring;
  if (text == "gloo") return collective_backend::gloo;
  return std::nullopt;
}

collective_backend default_collective_backend(bool plain_tcp) {
  return plain_tcp ? collective_backend::gloo : collective_backend::ring;
}

std::unique_ptr<network_group> make_network_group(collective_backend backend, caf::actor_system& system,
                                                  std::string name, int rank, int size, const std::string& host,
                                                  std::chrono::milliseconds timeout) {
  if (backend == collective_backend::gloo) return std::make_unique<gloo_group>(std::move(name), rank, size, host, timeout);
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

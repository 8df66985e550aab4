#include "plan/mesh.hpp"

#include <algorithm>
#include <stdexcept>

namespace ap {

namespace {

std::string count(int n, const std::string& what) { return std::to_string(n) + " " + what + (n == 1 ? "" : "s"); }

}  // namespace

std::size_t node_of(int replica, int stage, int stages, std::size_t nodes) {
  return static_cast<std::size_t>(replica * stages + stage) % nodes;
}

std::string describe_mesh(const mesh_shape& m, const std::vector<std::string>& nodes) {
  std::string text = count(m.data_parallel, "data-parallel replica") + " x " + count(m.stages, "stage") + " x " +
                     count(m.tensor_parallel, "tensor-parallel rank") + " = " +
                     count(m.data_parallel * m.stages * m.tensor_parallel, "compute rank");
  if (nodes.empty()) return text + ", all in this process";
  text += ";";
  bool shared = false;  // some node holds two replicas of one stage
  for (int d = 0; d < m.data_parallel; ++d)
    for (int s = 0; s < m.stages; ++s) {
      const std::string& node = nodes[node_of(d, s, m.stages, nodes.size())];
      for (int e = 0; e < d; ++e) shared = shared || nodes[node_of(e, s, m.stages, nodes.size())] == node;
      text += std::string(d + s == 0 ? " " : ", ") + (m.data_parallel > 1 ? "replica " + std::to_string(d) + " " : "") +
              "stage " + std::to_string(s) + ": node " + node + " (" + count(m.tensor_parallel, "rank") + ")";
    }
  if (shared) text += "; the replicas of a stage on one node reduce through shared memory first";
  return text;
}

std::optional<mesh_shape> elastic_mesh(const mesh_shape& planned, std::size_t nodes_listed, std::size_t nodes_left,
                                       const std::function<bool(const mesh_shape&)>& fits) {
  if (nodes_left == 0 || nodes_listed == 0) return std::nullopt;
  const std::size_t slots = static_cast<std::size_t>(planned.data_parallel * planned.stages);
  const std::size_t left = std::min(nodes_left, nodes_listed);
  const std::size_t kept = std::max(slots * left / nodes_listed, std::min(slots, left));
  mesh_shape m = planned;
  if (planned.data_parallel > 1)
    m.data_parallel = static_cast<int>(std::max<std::size_t>(1, kept / static_cast<std::size_t>(planned.stages)));
  else
    m.stages = static_cast<int>(std::max<std::size_t>(1, kept));
  for (;;) {
    if (!fits || fits(m)) return m;
    if (m.data_parallel > 1) --m.data_parallel;
    else if (m.stages > 1) --m.stages;
    else return std::nullopt;
  }
}

void check_mesh(const mesh_shape& m) {
  if (m.data_parallel < 1) throw std::invalid_argument("--data-parallel must be at least 1, got " + std::to_string(m.data_parallel));
  if (m.stages < 1) throw std::invalid_argument("--stages must be at least 1, got " + std::to_string(m.stages));
  if (m.tensor_parallel < 1)
    throw std::invalid_argument("--tensor-parallel must be at least 1, got " + std::to_string(m.tensor_parallel));
}

}  // namespace ap

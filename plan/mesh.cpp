#include "plan/mesh.hpp"

#include <stdexcept>

namespace ap {

namespace {

std::string count(int n, const std::string& what) { return std::to_string(n) + " " + what + (n == 1 ? "" : "s"); }

}  // namespace

std::string describe_mesh(const mesh_shape& m, const std::vector<std::string>& nodes) {
  std::string text = count(m.data_parallel, "data-parallel replica") + " x " + count(m.stages, "stage") + " x " +
                     count(m.tensor_parallel, "tensor-parallel rank") + " = " +
                     count(m.data_parallel * m.stages * m.tensor_parallel, "compute thread");
  if (nodes.empty()) return text + ", all in this process";
  text += ";";
  // Note [data-parallel nodes]: replica d's stage s on node (d * stages + s) % nodes.
  for (int d = 0; d < m.data_parallel; ++d)
    for (int s = 0; s < m.stages; ++s)
      text += std::string(d + s == 0 ? " " : ", ") + (m.data_parallel > 1 ? "replica " + std::to_string(d) + " " : "") +
              "stage " + std::to_string(s) + ": node " +
              nodes[static_cast<std::size_t>(d * m.stages + s) % nodes.size()] + " (" +
              count(m.tensor_parallel, "thread") + ")";
  return text;
}

void check_mesh(const mesh_shape& m) {
  if (m.data_parallel < 1) throw std::invalid_argument("--data-parallel must be at least 1, got " + std::to_string(m.data_parallel));
  if (m.stages < 1) throw std::invalid_argument("--stages must be at least 1, got " + std::to_string(m.stages));
  if (m.tensor_parallel < 1)
    throw std::invalid_argument("--tensor-parallel must be at least 1, got " + std::to_string(m.tensor_parallel));
}

}  // namespace ap

#include "plan/cores.hpp"

#include <sched.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <stdexcept>

namespace ap {

std::vector<int> process_cores() {
  cpu_set_t mask;
  CPU_ZERO(&mask);
  std::vector<int> cores;
  if (sched_getaffinity(0, sizeof mask, &mask) == 0) {
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &mask)) cores.push_back(c);
  }
  if (cores.empty()) cores.push_back(0);
  return cores;
}

std::vector<compute_cores> assign_cores(const std::vector<int>& cores, int ranks, int threads) {
  if (ranks < 1) throw std::invalid_argument("assign_cores: need at least 1 compute rank, got " + std::to_string(ranks));
  if (threads < 0) throw std::invalid_argument("--threads must be 0 (automatic) or more, got " + std::to_string(threads));
  const int each = threads > 0 ? threads : std::max(1, static_cast<int>(cores.size()) / ranks);
  return assign_cores(cores, std::vector<int>(static_cast<std::size_t>(ranks), each));
}

std::vector<int> threads_by_cost(const std::vector<double>& costs, int cores) {
  if (costs.empty()) throw std::invalid_argument("threads_by_cost: no stage");
  double total = 0.0;
  for (double c : costs) {
    if (!std::isfinite(c) || c < 0.0) throw std::invalid_argument("threads_by_cost: stage cost " + std::to_string(c));
    total += c;
  }
  const int stages = static_cast<int>(costs.size());
  std::vector<int> threads(costs.size(), 1);
  const int spare = cores - stages;
  if (spare <= 0) return threads;
  // Each stage's ideal share of the spare cores, on top of its one: cores * cost / total, less the 1 it has.
  std::vector<double> ideal(costs.size());
  int given = 0;
  for (std::size_t s = 0; s < costs.size(); ++s) {
    const double share = total > 0.0 ? cores * costs[s] / total : static_cast<double>(cores) / stages;
    ideal[s] = std::max(0.0, share - 1.0);
  }
  double ideal_total = 0.0;
  for (double i : ideal) ideal_total += i;
  for (std::size_t s = 0; s < costs.size(); ++s) {  // scaled so the ideals add up to the spare cores
    ideal[s] = ideal_total > 0.0 ? ideal[s] * spare / ideal_total : static_cast<double>(spare) / stages;
    const int whole = static_cast<int>(std::floor(ideal[s]));
    threads[s] += whole;
    given += whole;
  }
  std::vector<std::size_t> order(costs.size());
  for (std::size_t s = 0; s < order.size(); ++s) order[s] = s;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return ideal[a] - std::floor(ideal[a]) > ideal[b] - std::floor(ideal[b]);
  });
  for (std::size_t k = 0; given < spare; ++k, ++given) ++threads[order[k % order.size()]];
  return threads;
}

std::vector<compute_cores> assign_cores(const std::vector<int>& cores, const std::vector<int>& threads) {
  std::vector<compute_cores> placement;
  long needed = 0;
  for (int t : threads) {
    if (t < 1) throw std::invalid_argument("assign_cores: a rank needs at least 1 thread, got " + std::to_string(t));
    placement.push_back(compute_cores{t, {}});
    needed += t;
  }
  if (needed > static_cast<long>(cores.size())) return placement;
  auto next = cores.begin();
  for (compute_cores& c : placement) {
    c.cores.assign(next, next + c.threads);
    next += c.threads;
  }
  return placement;
}

std::string cores_text(const compute_cores& c) {
  if (c.cores.empty())
    return std::to_string(c.threads) + (c.threads == 1 ? " thread" : " threads") + ", not pinned";
  if (c.cores.size() == 1) return "core " + std::to_string(c.cores[0]);
  bool consecutive = true;
  for (std::size_t i = 1; i < c.cores.size(); ++i) consecutive = consecutive && c.cores[i] == c.cores[i - 1] + 1;
  if (consecutive) return "cores " + std::to_string(c.cores.front()) + "-" + std::to_string(c.cores.back());
  std::string list;
  for (int core : c.cores) list += (list.empty() ? "" : ",") + std::to_string(core);
  return "cores " + list;
}

std::vector<std::string> rank_names(int replicas, int stages, int tensor_parallel) {
  std::vector<std::string> names;
  for (int d = 0; d < replicas; ++d)
    for (int s = 0; s < std::max(stages, 1); ++s)
      for (int r = 0; r < tensor_parallel; ++r) {
        std::string name = replicas > 1 ? "replica " + std::to_string(d) : "";
        if (stages > 0) name += (name.empty() ? "" : " ") + std::string("stage ") + std::to_string(s);
        if (tensor_parallel > 1) name += (name.empty() ? "" : " ") + std::string("rank ") + std::to_string(r);
        names.push_back(name.empty() ? "rank 0" : name);
      }
  return names;
}

std::vector<node_slot> node_slots(int replicas, int stages, int tensor_parallel, const std::vector<std::string>& node_hosts) {
  if (node_hosts.empty()) throw std::invalid_argument("node_slots: need at least 1 node");
  const std::size_t nodes = node_hosts.size();
  std::map<std::string, int> hosted;  // ranks placed so far, by machine
  std::vector<node_slot> slots;
  for (int i = 0; i < replicas * stages; ++i) {
    int& ranks = hosted[node_hosts[static_cast<std::size_t>(i) % nodes]];
    slots.push_back(node_slot{ranks, 0});
    ranks += tensor_parallel;
  }
  for (int i = 0; i < replicas * stages; ++i)
    slots[static_cast<std::size_t>(i)].node_ranks = hosted[node_hosts[static_cast<std::size_t>(i) % nodes]];
  return slots;
}

std::string cores_layout_text(const std::vector<std::string>& names, const std::vector<compute_cores>& placement,
                              std::size_t cores) {
  if (placement.empty()) return "";
  if (placement.front().cores.empty()) {
    const int threads = placement.front().threads;
    return std::to_string(placement.size()) + " compute rank" + (placement.size() == 1 ? "" : "s") + " x " +
           std::to_string(threads) + (threads == 1 ? " thread" : " threads") + " on " + std::to_string(cores) +
           " core" + (cores == 1 ? "" : "s") + ", not pinned (more ranks x threads than cores)";
  }
  std::string out;
  for (std::size_t i = 0; i < placement.size(); ++i)
    out += (out.empty() ? "" : ", ") + (i < names.size() ? names[i] : "rank " + std::to_string(i)) + ": " +
           cores_text(placement[i]);
  return out;
}

}  // namespace ap

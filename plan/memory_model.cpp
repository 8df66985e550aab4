#include "plan/memory_model.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <stdexcept>
#include <string>

#include "plan/mesh.hpp"
#include "schedule/schedule.hpp"

namespace ap {

std::uint64_t optimizer_state_bytes(const optimizer_config& optimizer) {
  if (optimizer.kind == "adam" || optimizer.kind == "adamw") return 8;
  if (optimizer.kind == "sgd") return optimizer.momentum != 0.0f ? 4 : 0;
  throw std::invalid_argument("optimizer_state_bytes: unknown optimizer '" + optimizer.kind + "'");
}

std::vector<stash_peak> stash_peaks(const schedule& s, const std::vector<std::uint64_t>& chunk_stash,
                                    const std::vector<std::uint64_t>& chunk_input_held) {
  std::vector<stash_peak> peaks;
  for (const std::vector<action>& row : s.per_stage) {
    stash_peak now, peak;
    for (const action& a : row) {
      const auto c = static_cast<std::size_t>(a.chunk);
      const std::uint64_t bytes = chunk_stash.at(c);
      const std::uint64_t held = chunk_input_held.empty() ? bytes : chunk_input_held.at(c);
      if (a.kind == op::forward) {
        now.bytes += bytes, ++now.activations;
      } else if (a.kind == op::backward) {
        now.bytes -= bytes, --now.activations;
      } else if (a.kind == op::backward_input) {
        now.bytes = now.bytes - bytes + held;
      } else if (a.kind == op::backward_weight) {
        now.bytes -= held, --now.activations;
      }
      if (now.bytes > peak.bytes) peak = now;
    }
    peaks.push_back(peak);
  }
  return peaks;
}

std::vector<stage_memory> predict_stage_memory(sequential& model, const std::vector<layer_range>& ranges,
                                               const schedule& s, const std::vector<std::uint64_t>& stash_bytes,
                                               const optimizer_config& optimizer,
                                               const std::vector<std::uint64_t>& input_held_bytes,
                                               const std::vector<std::uint64_t>& workspace_bytes) {
  const int stages = s.stages;
  if (stages < 1 || s.per_stage.size() != static_cast<std::size_t>(stages) || stash_bytes.size() != model.size() ||
      (!input_held_bytes.empty() && input_held_bytes.size() != model.size()) ||
      (!workspace_bytes.empty() && workspace_bytes.size() != model.size()) ||
      ranges.size() != static_cast<std::size_t>(stages * s.chunks_per_stage))
    throw std::invalid_argument("predict_stage_memory: " + std::to_string(ranges.size()) + " chunks and " +
                                std::to_string(stash_bytes.size()) + " layer stashes for a schedule of " +
                                std::to_string(stages) + " stages x " + std::to_string(s.chunks_per_stage) +
                                " chunks and a model of " + std::to_string(model.size()) + " layers");
  const std::uint64_t state = optimizer_state_bytes(optimizer);
  std::vector<stage_memory> out(static_cast<std::size_t>(stages));
  std::vector<std::uint64_t> chunk_stash(ranges.size(), 0), chunk_held(ranges.size(), 0);
  for (std::size_t c = 0; c < ranges.size(); ++c) {
    stage_memory& m = out[static_cast<std::size_t>(stage_of_chunk(static_cast<int>(c), stages))];
    for (std::size_t i = ranges[c].begin; i < ranges[c].end; ++i) {
      chunk_stash[c] += stash_bytes.at(i);
      chunk_held[c] += input_held_bytes.empty() ? stash_bytes.at(i) : input_held_bytes.at(i);
      if (!workspace_bytes.empty()) m.workspace = std::max(m.workspace, workspace_bytes.at(i));
      m.weight_copies += model.at(i).derived_bytes();
      for (const parameter& p : model.at(i).parameters("")) {
        const auto n = static_cast<std::uint64_t>(p.value->size());
        m.parameters += 4 * n;
        m.gradients += 4 * n;
        m.optimizer_state += state * n;
      }
    }
  }
  const std::vector<stash_peak> peaks = stash_peaks(s, chunk_stash, chunk_held);
  for (std::size_t st = 0; st < out.size(); ++st) {
    out[st].stash = peaks[st].bytes;
    out[st].in_flight = peaks[st].activations;
  }
  return out;
}

std::vector<stage_memory> predict_stage_memory(sequential& model, const std::vector<layer_range>& ranges,
                                               const schedule& s, const std::vector<layer_cost>& costs,
                                               const optimizer_config& optimizer) {
  std::vector<std::uint64_t> workspace;
  for (const layer_cost& c : costs) workspace.push_back(c.workspace_bytes);
  return predict_stage_memory(model, ranges, s, stash_of(costs), optimizer, input_held_of(costs), workspace);
}

std::vector<std::uint64_t> stash_of(const std::vector<layer_cost>& costs) {
  std::vector<std::uint64_t> bytes;
  for (const layer_cost& c : costs) bytes.push_back(c.stash_bytes);
  return bytes;
}

std::vector<std::uint64_t> input_held_of(const std::vector<layer_cost>& costs) {
  std::vector<std::uint64_t> bytes;
  for (const layer_cost& c : costs) bytes.push_back(c.input_held_bytes);
  return bytes;
}

std::uint64_t parse_memory_size(const std::string& text) {
  const auto refuse = [&] {
    return std::invalid_argument("memory size '" + text + "': give bytes or a number with K, M, G or T (e.g. 512M, 2G)");
  };
  std::size_t used = 0;
  double value = 0.0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    throw refuse();
  }
  std::string unit = text.substr(used);
  for (char& ch : unit) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  if (unit.size() > 1 && unit.back() == 'B') unit.pop_back();
  if (unit.size() > 1 && unit.back() == 'I') unit.pop_back();
  double scale = 1.0;
  if (unit == "K") scale = 1024.0;
  else if (unit == "M") scale = 1024.0 * 1024.0;
  else if (unit == "G") scale = 1024.0 * 1024.0 * 1024.0;
  else if (unit == "T") scale = 1024.0 * 1024.0 * 1024.0 * 1024.0;
  else if (!unit.empty() && unit != "B") throw refuse();
  if (!(value > 0.0) || !std::isfinite(value)) throw refuse();
  return static_cast<std::uint64_t>(value * scale);
}

std::string memory_text(std::uint64_t bytes) {
  char buf[32];
  const double b = static_cast<double>(bytes);
  if (b >= 1024.0 * 1024.0 * 1024.0) std::snprintf(buf, sizeof buf, "%.1f GB", b / (1024.0 * 1024.0 * 1024.0));
  else if (b >= 1024.0 * 1024.0) std::snprintf(buf, sizeof buf, "%.1f MB", b / (1024.0 * 1024.0));
  else if (b >= 1024.0) std::snprintf(buf, sizeof buf, "%.1f KB", b / 1024.0);
  else std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(bytes));
  return buf;
}

std::string weight_copies_text(std::uint64_t bytes) {
  return bytes == 0 ? std::string() : ", weight copies " + memory_text(bytes);
}

std::vector<stage_memory> across_tensor_parallel(std::vector<stage_memory> stages, int tensor_parallel) {
  for (stage_memory& m : stages) {
    m.stash *= static_cast<std::uint64_t>(std::max(1, tensor_parallel));
    m.workspace *= static_cast<std::uint64_t>(std::max(1, tensor_parallel));
  }
  return stages;
}

std::vector<stage_memory> of_all_ranks(std::vector<stage_memory> rank, int tensor_parallel) {
  const auto T = static_cast<std::uint64_t>(std::max(1, tensor_parallel));
  for (stage_memory& m : rank) {
    m.parameters *= T, m.gradients *= T, m.optimizer_state *= T, m.stash *= T, m.workspace *= T, m.weight_copies *= T;
  }
  return rank;
}

// Note [memory budget]
std::vector<memory_holder> memory_holders(int stages, int replicas, const std::vector<std::string>& nodes) {
  if (nodes.empty()) {
    memory_holder here{"this process", {}};
    for (int d = 0; d < replicas; ++d)
      for (int s = 0; s < stages; ++s) here.stages.push_back(s);
    return {here};
  }
  std::vector<memory_holder> holders;
  for (const std::string& n : nodes) holders.push_back({"node " + n, {}});
  for (int d = 0; d < replicas; ++d)
    for (int s = 0; s < stages; ++s)
      holders[node_of(d, s, stages, nodes.size())].stages.push_back(s);
  std::vector<memory_holder> used;
  for (auto& h : holders)
    if (!h.stages.empty()) used.push_back(std::move(h));
  return used;
}

std::string over_budget(const std::vector<stage_memory>& stages, const std::vector<memory_holder>& holders,
                        std::uint64_t budget) {
  for (const memory_holder& h : holders) {
    std::uint64_t total = 0;
    for (int s : h.stages) total += stages.at(static_cast<std::size_t>(s)).total();
    if (total <= budget) continue;
    std::string parts;
    for (int s : h.stages) {
      const stage_memory& m = stages.at(static_cast<std::size_t>(s));
      parts += (parts.empty() ? "" : "; ") + std::string("stage ") + std::to_string(s) + " " + memory_text(m.total()) +
               " (weights " + memory_text(m.parameters) + ", gradients " + memory_text(m.gradients) + ", optimizer state " +
               memory_text(m.optimizer_state) + ", stash " + memory_text(m.stash) + " at " + std::to_string(m.in_flight) +
               " activations in flight, workspace " + memory_text(m.workspace) + weight_copies_text(m.weight_copies) + ")";
    }
    return h.name + " needs about " + memory_text(total) + ", over --max-memory " + memory_text(budget) + ": " + parts +
           " (Note [memory model]). What would fit: more stages or nodes (fewer layers each), a schedule with fewer "
           "microbatches in flight (1f1b rather than gpipe), --recompute blocks, or --dtype bf16 (half the stash)";
  }
  return "";
}

resident_memory measure_resident_memory() {
  resident_memory m;
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    const auto kb = [&](std::size_t at) { return std::stoull(line.substr(at)) * 1024; };  // "VmRSS:   1234 kB"
    if (line.rfind("VmRSS:", 0) == 0) m.now = kb(6);
    if (line.rfind("VmHWM:", 0) == 0) m.peak = kb(6);
  }
  return m;
}

bool reset_peak_resident_memory() {
  std::ofstream refs("/proc/self/clear_refs");
  refs << "5" << std::flush;
  return static_cast<bool>(refs);
}

}  // namespace ap

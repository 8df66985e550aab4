#include "plan/partition.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <limits>
#include <stdexcept>

#include "tensor/compute.hpp"
#include "tensor/tensor_memory.hpp"

namespace ap {

partition_method parse_partition_method(const std::string& name) {
  if (name == "uniform") return partition_method::uniform;
  if (name == "params") return partition_method::parameters;
  if (name == "time") return partition_method::time;
  throw std::invalid_argument("unknown partition method '" + name + "' (known: uniform, params, time)");
}

std::string to_string(partition_method m) {
  switch (m) {
    case partition_method::uniform: return "uniform";
    case partition_method::parameters: return "params";
    case partition_method::time: return "time";
  }
  return "?";
}

// Note [balanced split]
std::vector<std::size_t> balanced_counts(const std::vector<double>& costs, int chunks) {
  const std::size_t n = costs.size();
  if (chunks < 1) throw std::invalid_argument("balanced split: need at least one chunk, got " + std::to_string(chunks));
  const auto k = static_cast<std::size_t>(chunks);
  if (k > n)
    throw std::invalid_argument("balanced split: cannot split " + std::to_string(n) + " layers into " +
                                std::to_string(k) + " chunks: every chunk needs at least one layer");
  for (std::size_t i = 0; i < n; ++i)
    if (!(costs[i] >= 0.0) || !std::isfinite(costs[i]))
      throw std::invalid_argument("balanced split: layer " + std::to_string(i) + " has cost " +
                                  std::to_string(costs[i]) + "; costs must be finite and non-negative");
  std::vector<double> prefix(n + 1, 0.0);
  for (std::size_t i = 0; i < n; ++i) prefix[i + 1] = prefix[i] + costs[i];
  auto sum = [&](std::size_t from, std::size_t to) { return prefix[to] - prefix[from]; };  // layers [from, to)
  const double inf = std::numeric_limits<double>::infinity();

  // Phase 1: bottleneck[j][i] = the smallest largest chunk over splits of layers [0, i) into j chunks.
  std::vector<std::vector<double>> bottleneck(k + 1, std::vector<double>(n + 1, inf));
  bottleneck[0][0] = 0.0;
  for (std::size_t j = 1; j <= k; ++j)
    for (std::size_t i = j; i <= n - (k - j); ++i)
      for (std::size_t t = j - 1; t < i; ++t)
        bottleneck[j][i] = std::min(bottleneck[j][i], std::max(bottleneck[j - 1][t], sum(t, i)));
  const double best = bottleneck[k][n];
  const double limit = best + 1e-12 * std::max(1.0, std::abs(best));

  // Phase 2: among splits within the bottleneck, the smallest (sum of squared chunk costs, sum of squared layer
  // counts): sums over chunks, so the programme stays exact.
  struct score {
    double squares = std::numeric_limits<double>::infinity();
    double counts = 0.0;
    bool operator<(const score& o) const {
      if (std::isinf(squares) || std::isinf(o.squares)) return squares < o.squares;
      const double tolerance = 1e-9 * std::max({1.0, std::abs(squares), std::abs(o.squares)});
      if (std::abs(squares - o.squares) > tolerance) return squares < o.squares;
      return counts < o.counts;
    }
  };
  std::vector<std::vector<score>> best_score(k + 1, std::vector<score>(n + 1));
  std::vector<std::vector<std::size_t>> cut(k + 1, std::vector<std::size_t>(n + 1, 0));
  best_score[0][0] = score{0.0, 0.0};
  for (std::size_t j = 1; j <= k; ++j)
    for (std::size_t i = j; i <= n - (k - j); ++i)
      for (std::size_t t = j - 1; t < i; ++t) {
        const double c = sum(t, i);
        if (c > limit || std::isinf(best_score[j - 1][t].squares)) continue;
        const double layers = static_cast<double>(i - t);
        const score candidate{best_score[j - 1][t].squares + c * c, best_score[j - 1][t].counts + layers * layers};
        if (candidate < best_score[j][i]) best_score[j][i] = candidate, cut[j][i] = t;
      }

  std::vector<std::size_t> counts(k);
  for (std::size_t j = k, i = n; j > 0; --j) {
    const std::size_t t = cut[j][i];
    counts[j - 1] = i - t;
    i = t;
  }
  return counts;
}

std::vector<std::size_t> chunk_layer_counts(const std::vector<layer_range>& chunk_ranges) {
  std::vector<std::size_t> counts;
  for (const auto& r : chunk_ranges) counts.push_back(r.end - r.begin);
  return counts;
}

std::vector<std::size_t> uniform_counts(std::size_t layers, int chunks) {
  return chunk_layer_counts(uniform_chunk_ranges(layers, chunks));
}

std::vector<double> parameters_per_layer(const sequential& model) {
  sequential copy = model.clone();  // layer::parameters() hands out mutable pointers: ask a copy
  std::vector<double> counts;
  for (std::size_t i = 0; i < copy.size(); ++i) {
    double c = 0.0;
    for (const parameter& p : copy.at(i).parameters("")) c += static_cast<double>(p.value->size());
    counts.push_back(c);
  }
  return counts;
}

namespace {

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

template <class F>
double seconds_of(F&& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

std::vector<layer_cost> measure_layer_costs(const sequential& model, const tensor& sample, int repeats, int threads) {
  if (repeats < 1) throw std::invalid_argument("measure_layer_costs: repeats must be positive, got " + std::to_string(repeats));
  if (threads < 1) throw std::invalid_argument("measure_layer_costs: threads must be positive, got " + std::to_string(threads));
  // The caller's own setting comes back afterwards, whatever happens here.
  struct threads_restored {
    int before = compute_threads();
    ~threads_restored() { set_compute_threads(before); }
  } restore;
  set_compute_threads(threads);
  sequential work = model.clone();
  const std::size_t n = work.size();
  std::vector<std::vector<double>> forward(n), input(n), weight(n);  // seconds per repeat
  std::vector<std::uint64_t> stash(n, 0), output(n, 0), held(n, 0);  // bytes kept by the F, given, kept after I
  std::vector<std::uint64_t> workspace(n, 0);
  // The most `work` added to the tensor bytes in use at once (the warm-up pass: nothing else runs then).
  const auto peak_added = [](const std::function<void()>& work) {
    const std::uint64_t before = tensor_bytes_in_use();
    reset_tensor_bytes_peak();
    work();
    return tensor_bytes_peak() - std::min(before, tensor_bytes_peak());
  };
  for (int r = 0; r <= repeats; ++r) {  // r == 0 warms up
    const forward_context ctx{true, static_cast<std::uint64_t>(r), 0};
    std::vector<layer_cache> caches(n);
    std::vector<tensor> outputs(n);
    const tensor* x = &sample;
    for (std::size_t i = 0; i < n; ++i) {
      const auto forward_i = [&] { outputs[i] = work.at(i).forward(*x, caches[i], ctx); };
      double s = 0.0;
      if (r == 0) {
        // Its input, output and temporaries, less its stash and the weight copies this first forward makes
        // (counted on their own, Note [memory model]).
        const std::uint64_t added = peak_added(forward_i);
        stash[i] = caches[i].bytes(), output[i] = outputs[i].byte_size();
        workspace[i] = x->byte_size() + added - std::min(added, stash[i] + work.at(i).derived_bytes());
      } else {
        s = seconds_of(forward_i);
      }
      // The input is let go as a stage lets it go, so the pass holds what training holds.
      if (i > 0) outputs[i - 1] = tensor();
      x = &outputs[i];
      if (r > 0) forward[i].push_back(s);
    }
    tensor dy = n > 0 ? outputs[n - 1] : tensor{};
    for (std::size_t i = n; i-- > 0;) {
      tensor dx;
      // Layer 0's dx is never needed; a block there still runs its inner backward_input (counted as W).
      const auto input_i = [&] {
        if (i > 0) work.at(i).backward_input(dy, caches[i], &dx);
      };
      const auto weight_i = [&] {
        if (i == 0) work.at(i).backward_input(dy, caches[i], nullptr);
        if (r == 0 && i == 0) held[i] = caches[i].bytes() + dy.byte_size();
        work.at(i).backward_weight(dy, caches[i]);
      };
      double si = 0.0, sw = 0.0;
      if (r == 0) {  // its dy in flight, its dx and temporaries (the stash it reads is counted as stash)
        const std::uint64_t added = peak_added([&] {
          input_i();
          if (i > 0) held[i] = caches[i].bytes() + dy.byte_size();
          weight_i();
        });
        workspace[i] = std::max(workspace[i], dy.byte_size() + added);
      } else {
        si = i == 0 ? 0.0 : seconds_of(input_i);
        sw = seconds_of(weight_i);
      }
      if (r > 0) input[i].push_back(si), weight[i].push_back(sw);
      dy = std::move(dx);
    }
  }
  std::vector<layer_cost> costs(n);
  for (std::size_t i = 0; i < n; ++i)
    costs[i] = {median(forward[i]), median(input[i]), median(weight[i]), stash[i], output[i], held[i], workspace[i]};
  return costs;
}

std::vector<double> total_costs(const std::vector<layer_cost>& costs) {
  std::vector<double> t;
  for (const auto& c : costs) t.push_back(c.total_s());
  return t;
}

// Note [whole blocks]
std::vector<std::size_t> block_sizes(const sequential& model) {
  std::vector<std::size_t> sizes;
  bool seen_parameters = false;
  for (double p : parameters_per_layer(model)) {
    // A parameterised layer opens a block, except the first one: the layers before it join its block.
    if (sizes.empty() || (p > 0.0 && seen_parameters)) sizes.push_back(0);
    seen_parameters = seen_parameters || p > 0.0;
    ++sizes.back();
  }
  return sizes;
}

namespace {

// Per-layer values summed per unit (units[u] consecutive layers each).
std::vector<double> sum_per_unit(const std::vector<double>& per_layer, const std::vector<std::size_t>& units) {
  std::vector<double> sums;
  std::size_t layer = 0;
  for (std::size_t size : units) {
    double s = 0.0;
    for (std::size_t i = 0; i < size; ++i) s += per_layer.at(layer++);
    sums.push_back(s);
  }
  return sums;
}

// Unit counts per chunk -> layer counts per chunk.
std::vector<std::size_t> layers_of_units(const std::vector<std::size_t>& unit_counts,
                                         const std::vector<std::size_t>& units) {
  std::vector<std::size_t> layers;
  std::size_t unit = 0;
  for (std::size_t count : unit_counts) {
    std::size_t n = 0;
    for (std::size_t i = 0; i < count; ++i) n += units.at(unit++);
    layers.push_back(n);
  }
  return layers;
}

}  // namespace

std::vector<std::size_t> partition_counts(partition_method method, const sequential& model,
                                          const std::vector<layer_cost>& costs, int chunks) {
  if (method == partition_method::time && costs.size() != model.size())
    throw std::invalid_argument("partition by time: " + std::to_string(costs.size()) + " layer costs for a model of " +
                                std::to_string(model.size()) + " layers");
  // Whole blocks when there are enough of them, else single layers (Note [whole blocks]).
  std::vector<std::size_t> units = block_sizes(model);
  if (chunks < 1 || units.size() < static_cast<std::size_t>(chunks)) units.assign(model.size(), 1);
  std::vector<std::size_t> unit_counts;
  switch (method) {
    case partition_method::uniform: unit_counts = uniform_counts(units.size(), chunks); break;
    case partition_method::parameters:
      unit_counts = balanced_counts(sum_per_unit(parameters_per_layer(model), units), chunks);
      break;
    case partition_method::time: unit_counts = balanced_counts(sum_per_unit(total_costs(costs), units), chunks); break;
  }
  return layers_of_units(unit_counts, units);
}

std::vector<std::size_t> chunks_without_parameters(const sequential& model, const std::vector<layer_range>& chunk_ranges) {
  const std::vector<double> params = parameters_per_layer(model);
  std::vector<std::size_t> empty;
  for (std::size_t c = 0; c < chunk_ranges.size(); ++c) {
    double sum = 0.0;
    for (std::size_t l = chunk_ranges[c].begin; l < chunk_ranges[c].end && l < params.size(); ++l) sum += params[l];
    if (sum == 0.0) empty.push_back(c);
  }
  return empty;
}

namespace {

// Sum of `field` over the layers of every chunk, accumulated on the chunk's stage.
template <class Field>
std::vector<double> per_stage_sum(const std::vector<layer_cost>& costs, const std::vector<layer_range>& chunk_ranges,
                                  int stages, Field field) {
  if (stages < 1) throw std::invalid_argument("per-stage costs: stages must be positive, got " + std::to_string(stages));
  std::vector<double> out(static_cast<std::size_t>(stages), 0.0);
  for (std::size_t c = 0; c < chunk_ranges.size(); ++c)
    for (std::size_t l = chunk_ranges[c].begin; l < chunk_ranges[c].end; ++l) {
      if (l >= costs.size())
        throw std::invalid_argument("per-stage costs: chunk " + std::to_string(c) + " holds layer " + std::to_string(l) +
                                    " but only " + std::to_string(costs.size()) + " layer costs are given");
      out[static_cast<std::size_t>(stage_of_chunk(static_cast<int>(c), stages))] += field(costs[l]);
    }
  return out;
}

}  // namespace

std::vector<double> predicted_busy_s(const std::vector<layer_cost>& costs, const std::vector<layer_range>& chunk_ranges,
                                     int stages, int microbatches) {
  auto busy = per_stage_sum(costs, chunk_ranges, stages, [](const layer_cost& c) { return c.total_s(); });
  for (double& b : busy) b *= microbatches;
  return busy;
}

std::vector<layer_cost> costs_at_stage_threads(const std::map<int, std::vector<layer_cost>>& by_threads,
                                               const std::vector<int>& stage_threads,
                                               const std::vector<layer_range>& chunk_ranges) {
  const int stages = static_cast<int>(stage_threads.size());
  if (stages < 1) throw std::invalid_argument("costs at the stages' threads: no stage is given");
  std::vector<layer_cost> out;
  for (std::size_t c = 0; c < chunk_ranges.size(); ++c) {
    const int s = stage_of_chunk(static_cast<int>(c), stages);
    const int t = stage_threads[static_cast<std::size_t>(s)];
    const auto it = by_threads.find(t);
    if (it == by_threads.end())
      throw std::invalid_argument("costs at the stages' threads: stage " + std::to_string(s) + " runs on " +
                                  std::to_string(t) + " threads, but no layer costs were measured on that many");
    const layer_range& r = chunk_ranges[c];
    if (r.end > it->second.size())
      throw std::invalid_argument("costs at the stages' threads: chunk " + std::to_string(c) + " ends at layer " +
                                  std::to_string(r.end) + " but only " + std::to_string(it->second.size()) +
                                  " layer costs are given");
    if (out.size() < r.end) out.resize(r.end);
    for (std::size_t l = r.begin; l < r.end; ++l) out[l] = it->second[l];
  }
  return out;
}

op_costs simulation_costs(const std::vector<layer_cost>& costs, const std::vector<layer_range>& chunk_ranges, int stages) {
  op_costs out;
  out.forward = per_stage_sum(costs, chunk_ranges, stages, [](const layer_cost& c) { return c.forward_s; });
  out.backward_input = per_stage_sum(costs, chunk_ranges, stages, [](const layer_cost& c) { return c.backward_input_s; });
  out.backward_weight = per_stage_sum(costs, chunk_ranges, stages, [](const layer_cost& c) { return c.backward_weight_s; });
  return out;
}

}  // namespace ap

#include "plan/auto_config.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <stdexcept>
#include <thread>
#include <tuple>

#include "collective/local_group.hpp"
#include "model/parallel_attention.hpp"
#include "model/parallel_linear.hpp"
#include "model/tensor_parallel.hpp"
#include "plan/mesh.hpp"
#include "schedule/schedule.hpp"

namespace ap {
namespace {

std::string plural(int n, const std::string& one) { return std::to_string(n) + " " + one + (n == 1 ? "" : "s"); }

std::string counts_text(const std::vector<std::size_t>& counts) {
  std::string text;
  for (std::size_t c : counts) text += (text.empty() ? "" : ",") + std::to_string(c);
  return text;
}

// 1, 2, 4, ... up to `cores`, and `cores` itself.
std::vector<int> powers_of_two_and(int cores) {
  std::vector<int> out;
  for (int n = 1; n <= cores; n *= 2) out.push_back(n);
  if (out.back() != cores) out.push_back(cores);
  return out;
}

// All-reduces a top-level layer makes per microbatch once split: forward (row-parallel outputs) and backward
// (column-parallel input gradients); zero for a layer that stays whole.
struct layer_reductions {
  int forward = 0, backward = 0;
};

std::vector<layer_reductions> tensor_parallel_reductions(const sequential& model) {
  sequential split = sequential::from_layer_specs(tensor_parallel_specs(model.layer_specs()));
  std::vector<layer_reductions> out(split.size());
  for (std::size_t i = 0; i < split.size(); ++i) {
    sequential one = split.slice(i, i + 1);
    for (tensor_parallel_layer* part : tensor_parallel_layers(one)) {
      const bool attention = dynamic_cast<head_parallel_attention*>(part) != nullptr;
      out[i].forward += attention || dynamic_cast<row_parallel_linear*>(part) ? 1 : 0;
      out[i].backward += attention || dynamic_cast<column_parallel_linear*>(part) ? 1 : 0;
    }
  }
  return out;
}

// A tensor-parallel rank's costs: a split layer computes 1/T of its time and waits for its all-reduces;
// `reduce_s` collects the all-reduce seconds per layer.
std::vector<layer_cost> tensor_parallel_costs(const std::vector<layer_cost>& whole,
                                              const std::vector<layer_reductions>& reductions, int T,
                                              const auto_inputs& in, std::vector<double>& reduce_s) {
  reduce_s.assign(whole.size(), 0.0);
  if (T == 1) return whole;
  std::vector<layer_cost> out = whole;
  for (std::size_t i = 0; i < whole.size(); ++i) {
    const layer_reductions& r = reductions.at(i);
    if (r.forward + r.backward == 0) continue;
    layer_cost& c = out[i];
    c.forward_s /= T, c.backward_input_s /= T, c.backward_weight_s /= T;
    const double f = r.forward * in.allreduce_s(T, whole[i].output_bytes);
    // Layer 0's input gradient is never computed, so it reduces nothing backward.
    const double b = i == 0 ? 0.0 : r.backward * in.allreduce_s(T, whole[i - 1].output_bytes);
    c.forward_s += f, c.backward_input_s += b;
    reduce_s[i] = f + b;
  }
  return out;
}

// True when some layer of `model` would recompute its forward under recompute_mode::blocks.
bool has_blocks(const sequential& model) {
  sequential copy = model.clone();
  copy.set_recompute(recompute_mode::blocks);
  for (std::size_t i = 0; i < copy.size(); ++i)
    if (copy.at(i).recomputes()) return true;
  return false;
}

// Everything this process holds: D replicas of every stage over its T ranks (Note [memory budget]).
std::uint64_t process_memory(const std::vector<stage_memory>& stages, int D, int T) {
  std::uint64_t total = 0;
  for (const stage_memory& m : across_tensor_parallel(stages, T)) total += m.total();
  return static_cast<std::uint64_t>(D) * total;
}

std::uint64_t gradient_bytes(sequential& model, layer_range range) {
  std::uint64_t bytes = 0;
  for (std::size_t i = range.begin; i < range.end; ++i)
    for (const parameter& p : model.at(i).parameters("")) bytes += 4 * static_cast<std::uint64_t>(p.value->size());
  return bytes;
}

// What every candidate of one (rows, threads, recompute, T) shares.
struct cost_view {
  std::size_t rows = 0;           // a microbatch's
  std::vector<layer_cost> costs;  // a rank's, T applied
  std::vector<double> reduce_s;   // the tensor-parallel all-reduce seconds inside each layer's costs
};

class planner {
 public:
  planner(sequential& model, const auto_inputs& in)
      : model_(model),
        in_(in),
        reductions_(tensor_parallel_reductions(model)),
        parameters_(parameters_per_layer(model)) {
    blocks_ = static_cast<int>(block_sizes(model).size());
    for (double p : parameters_) all_parameters_ += p;
  }

  std::vector<auto_candidate> candidates() {
    if (!in_.nodes.empty()) return node_candidates();
    std::vector<recompute_mode> recomputes{recompute_mode::none};
    if (in_.budget > 0 && has_blocks(model_)) recomputes.push_back(recompute_mode::blocks);
    std::vector<int> tensor_sizes{1};
    for (int T : tensor_parallel_sizes(model_, in_.cores)) tensor_sizes.push_back(T);
    for (int D : powers_of_two_and(in_.cores)) {
      if (in_.batch % static_cast<std::size_t>(D) != 0) continue;
      const std::size_t replica_batch = in_.batch / static_cast<std::size_t>(D);
      for (int T : tensor_sizes)
        for (recompute_mode rc : recomputes) {
          if (D * T > in_.cores) continue;
          for (int t : powers_of_two_and(in_.cores))
            if (D * T * t <= in_.cores) add_single(D, T, t, rc, replica_batch);
          for (int P = 2; P <= std::min(blocks_, in_.cores / (D * T)); ++P)
            for (int t : powers_of_two_and(in_.cores))
              if (P * D * T * t <= in_.cores) add_pipelines(P, D, T, t, rc, replica_batch);
        }
    }
    return std::move(found_);
  }

 private:
  // Pipelines of P >= 1 stages, placed by node_of, fitting every machine's cores (Note [auto on nodes]).
  std::vector<auto_candidate> node_candidates() {
    int total = 0, largest = 0;
    for (const auto_node& n : in_.nodes) {
      if (n.cores < 1) throw std::invalid_argument("--auto: node on " + n.host + " reports " + std::to_string(n.cores) + " cores");
      if (machine_cores_.emplace(n.host, n.cores).second) total += n.cores;
      largest = std::max(largest, n.cores);
    }
    std::set<int> fixed;
    std::string fixed_text;
    for (std::size_t i = 0; i < in_.nodes.size(); ++i)
      if (in_.nodes[i].threads > 0) {
        fixed.insert(in_.nodes[i].threads);
        fixed_text += (fixed_text.empty() ? "" : ", ") + std::string("node ") + std::to_string(i) + " " +
                      plural(in_.nodes[i].threads, "thread");
      }
    if (fixed.size() > 1)
      throw std::invalid_argument("--auto: the nodes were started with different --threads (" + fixed_text +
                                  "): start them with the same, or without it, so that every rank runs alike");
    const std::vector<int> threads = fixed.empty() ? powers_of_two_and(largest) : std::vector<int>{*fixed.begin()};
    std::vector<recompute_mode> recomputes{recompute_mode::none};
    if (in_.budget > 0 && has_blocks(model_)) recomputes.push_back(recompute_mode::blocks);
    std::vector<int> tensor_sizes{1};
    for (int T : tensor_parallel_sizes(model_, largest)) tensor_sizes.push_back(T);
    for (int D : powers_of_two_and(total)) {
      if (in_.batch % static_cast<std::size_t>(D) != 0) continue;
      const std::size_t replica_batch = in_.batch / static_cast<std::size_t>(D);
      for (int T : tensor_sizes)
        for (recompute_mode rc : recomputes)
          for (int P = 1; P <= blocks_ && P * D * T <= total; ++P)
            for (int t : threads)
              if (fits_nodes(P, D, T, t)) add_pipelines(P, D, T, t, rc, replica_batch);
    }
    return std::move(found_);
  }

  // Every machine's ranks x t within its cores, the ranks placed by node_of.
  bool fits_nodes(int P, int D, int T, int t) const {
    std::map<std::string, int> ranks;
    for (int d = 0; d < D; ++d)
      for (int s = 0; s < P; ++s) ranks[in_.nodes[node_of(d, s, P, in_.nodes.size())].host] += T;
    for (const auto& [host, n] : ranks)
      if (n * t > machine_cores_.at(host)) return false;
    return true;
  }

  const cost_view& view(std::size_t rows, int threads, recompute_mode rc, int T) {
    const auto key = std::make_tuple(rows, threads, rc, T);
    auto it = views_.find(key);
    if (it != views_.end()) return it->second;
    cost_view v;
    v.rows = rows;
    v.costs = tensor_parallel_costs(in_.layer_costs(rows, threads, rc), reductions_, T, in_, v.reduce_s);
    return views_.emplace(key, std::move(v)).first->second;
  }

  // A rank's optimizer step over layers [begin, end): its share of the whole model's, split layers 1/T.
  double optimizer_s(std::size_t begin, std::size_t end, int T, int threads) {
    if (all_parameters_ <= 0.0) return 0.0;
    double share = 0.0;
    for (std::size_t i = begin; i < end; ++i) {
      const layer_reductions& r = reductions_.at(i);
      share += parameters_.at(i) / (r.forward + r.backward > 0 ? T : 1);
    }
    return in_.optimizer_s(threads) * share / all_parameters_;
  }

  void add_single(int D, int T, int t, recompute_mode rc, std::size_t replica_batch) {
    const cost_view& v = view(replica_batch, t, rc, T);
    auto_candidate c;
    c.config = mesh_config{0, 1, "", 1, D, T, t, rc, {}};
    double reduce = 0.0;
    for (std::size_t i = 0; i < v.costs.size(); ++i) c.compute_s += v.costs[i].total_s(), reduce += v.reduce_s[i];
    c.compute_s -= reduce;
    const std::size_t n = model_.size();
    c.compute_s += optimizer_s(0, n, T, t);
    c.communication_s = reduce + (D > 1 ? in_.allreduce_s(D, gradient_bytes(model_, {0, n})) : 0.0);
    c.step_s = c.compute_s + c.communication_s;
    c.peak_bytes = process_memory(
        predict_stage_memory(model_, {layer_range{0, n}}, make_schedule("gpipe", 1, 1), v.costs, in_.optimizer), D, T);
    keep(std::move(c));
  }

  void add_pipelines(int P, int D, int T, int t, recompute_mode rc, std::size_t replica_batch) {
    for (int m = P; m <= 8 * P && static_cast<std::size_t>(m) <= replica_batch; m *= 2) {
      // Microbatches differ by at most a row (split_rows): the largest sets the pace.
      const cost_view& v = view((replica_batch + m - 1) / static_cast<std::size_t>(m), t, rc, T);
      // One stage (replicas on nodes, Note [auto on nodes]): every schedule is the same but for memory.
      const std::vector<std::pair<std::string, int>> schedules =
          P == 1 ? std::vector<std::pair<std::string, int>>{{"1f1b", 1}}
                 : std::vector<std::pair<std::string, int>>{{"gpipe", 1}, {"1f1b", 1}, {"zb-h1", 1}, {"interleaved", 2}};
      for (const auto& [name, chunks] : schedules) {
        if (P * chunks > blocks_) continue;  // whole blocks (Note [whole blocks])
        add_pipeline(mesh_config{P, m, name, chunks, D, T, t, rc, {}}, v);
      }
    }
  }

  void add_pipeline(mesh_config config, const cost_view& v) {
    const int P = config.stages;
    config.layers_per_chunk = partition_counts(partition_method::time, model_, v.costs, P * config.chunks);
    const auto ranges = chunk_ranges_from_counts(config.layers_per_chunk, model_.size());
    const schedule s = make_schedule(config.schedule, P, config.microbatches, config.chunks);
    op_costs costs = simulation_costs(v.costs, ranges, P);
    const std::size_t N = in_.nodes.size();
    costs.transfer = in_.hop_s;
    if (N > 1) {  // every boundary crosses to another node (node_of: s and s + 1 differ) (Note [auto on nodes])
      costs.transfer = 0.0;  // the dearest crossing
      for (std::size_t k = 0; k + 1 < ranges.size(); ++k) {
        const std::uint64_t crossing = v.costs.at(ranges[k].end - 1).output_bytes;
        const std::size_t from = node_of(0, stage_of_chunk(static_cast<int>(k), P), P, N),
                          to = node_of(0, stage_of_chunk(static_cast<int>(k + 1), P), P, N);
        costs.transfer = std::max(costs.transfer, crossing < in_.link_bytes ? in_.network_s(crossing)
                                                                            : link_s(crossing, {from, to}));
      }
    }
    double coordinator_s = 0.0;  // the coordinator's messages that nothing overlaps (Note [auto on nodes])
    if (N > 0) {
      const std::uint64_t output = v.costs.back().output_bytes;
      costs.backward_input.back() += 2.0 * in_.network_s(output);  // spread over its chunks by the simulator
      const auto rows = static_cast<std::uint64_t>(v.rows);
      coordinator_s = in_.network_s(rows * in_.sample_bytes) + 2.0 * in_.network_s(0);
    }
    auto_candidate c;
    c.config = config;
    c.message_s = costs.transfer;
    if (N > 0) c.config.nodes = static_cast<int>(std::min<std::size_t>(N, static_cast<std::size_t>(P * config.data_parallel)));
    std::vector<double> reduce(static_cast<std::size_t>(P), 0.0), update(static_cast<std::size_t>(P), 0.0);
    std::vector<std::uint64_t> grads(static_cast<std::size_t>(P), 0);
    for (std::size_t k = 0; k < ranges.size(); ++k) {
      const auto stage = static_cast<std::size_t>(stage_of_chunk(static_cast<int>(k), P));
      for (std::size_t i = ranges[k].begin; i < ranges[k].end; ++i) reduce[stage] += v.reduce_s[i];
      grads[stage] += gradient_bytes(model_, ranges[k]);
      update[stage] += optimizer_s(ranges[k].begin, ranges[k].end, config.tensor_parallel, config.threads);
    }
    const std::vector<double> busy = predicted_busy_s(v.costs, ranges, P, config.microbatches);
    const auto busiest = static_cast<std::size_t>(std::max_element(busy.begin(), busy.end()) - busy.begin());
    c.compute_s = busy[busiest] - reduce[busiest] * config.microbatches;
    c.busy_s = busy;
    double data_reduce = 0.0;
    if (config.data_parallel > 1)
      for (std::size_t s = 0; s < grads.size(); ++s)
        data_reduce = std::max(data_reduce, data_parallel_reduce_s(config, static_cast<int>(s), grads[s]));
    c.communication_s = reduce[busiest] * config.microbatches + data_reduce;
    const double last_update = *std::max_element(update.begin(), update.end());
    c.compute_s += last_update;
    c.step_s = simulate(s, costs).makespan + data_reduce + last_update + coordinator_s;
    c.communication_s += coordinator_s;
    const std::vector<stage_memory> memory = predict_stage_memory(model_, ranges, s, v.costs, in_.optimizer);
    c.peak_bytes = N == 0 ? process_memory(memory, config.data_parallel, config.tensor_parallel)
                          : node_memory(memory, config.data_parallel, config.tensor_parallel);
    keep(std::move(c));
  }

  // Stage s's gradient all-reduce among its D replicas: shared memory within one process or node, else a ring.
  double data_parallel_reduce_s(const mesh_config& config, int s, std::uint64_t bytes) const {
    const int D = config.data_parallel;
    const std::size_t N = in_.nodes.size();
    std::set<std::size_t> nodes;
    for (int d = 0; N > 0 && d < D; ++d) nodes.insert(node_of(d, s, config.stages, N));
    if (nodes.size() <= 1) return in_.allreduce_s(D, bytes);
    return 2.0 * (D - 1) * link_s(bytes / static_cast<std::uint64_t>(D), nodes);
  }

  // A tensor on a data link among `nodes`: copied once where they share a host and that was timed, else sent.
  double link_s(std::uint64_t bytes, const std::set<std::size_t>& nodes) const {
    std::set<std::string> hosts;
    for (std::size_t n : nodes) hosts.insert(in_.nodes.at(n).host);
    if (hosts.size() == 1 && in_.copy_s) return in_.copy_s(bytes);
    return in_.link_s ? in_.link_s(bytes) : in_.network_s(bytes);
  }

  // Note [memory budget] on nodes: the most any node holds.
  std::uint64_t node_memory(const std::vector<stage_memory>& stages, int D, int T) const {
    const std::vector<stage_memory> ranks = across_tensor_parallel(stages, T);
    std::vector<std::uint64_t> held(in_.nodes.size(), 0);
    const int P = static_cast<int>(stages.size());
    for (int d = 0; d < D; ++d)
      for (int s = 0; s < P; ++s) held[node_of(d, s, P, held.size())] += ranks[static_cast<std::size_t>(s)].total();
    return *std::max_element(held.begin(), held.end());
  }

  void keep(auto_candidate c) {
    if (!smallest_ || c.peak_bytes < smallest_->peak_bytes) smallest_ = c;
    if (in_.budget == 0 || c.peak_bytes <= in_.budget) found_.push_back(std::move(c));
  }

  sequential& model_;
  const auto_inputs& in_;
  std::vector<layer_reductions> reductions_;
  std::vector<double> parameters_;  // per layer
  double all_parameters_ = 0.0;
  int blocks_ = 1;
  std::map<std::tuple<std::size_t, int, recompute_mode, int>, cost_view> views_;
  std::map<std::string, int> machine_cores_;  // with nodes: each host's cores
  std::vector<auto_candidate> found_;
  std::optional<auto_candidate> smallest_;  // the candidate with the smallest peak, fitting or not

 public:
  const std::optional<auto_candidate>& smallest() const { return smallest_; }
};

}  // namespace

std::string describe(const mesh_config& c) {
  const std::string threads = plural(c.threads, "thread");
  std::string text;
  if (c.stages > 0) {
    text = "pipeline: " + plural(c.stages, "stage") + " x " + threads + ", " + c.schedule + ", " +
           std::to_string(c.microbatches) + (c.microbatches == 1 ? " microbatch" : " microbatches");
    if (c.chunks > 1) text += ", " + std::to_string(c.chunks) + " chunks per stage";
    text += ", layers " + counts_text(c.layers_per_chunk);
    if (c.data_parallel > 1) text += ", " + plural(c.data_parallel, "replica");
    if (c.nodes > 0) text += ", on " + plural(c.nodes, "node");
  } else {
    text = "single process: " + (c.data_parallel > 1 ? plural(c.data_parallel, "replica") + " x " : "") + threads;
  }
  if (c.tensor_parallel > 1) text += ", " + std::to_string(c.tensor_parallel) + " tensor-parallel ranks";
  if (c.recompute != recompute_mode::none) text += std::string(", recompute ") + recompute_mode_name(c.recompute);
  return text;
}

std::vector<auto_candidate> rank_configurations(sequential& model, const auto_inputs& in) {
  if (in.cores < 1) throw std::invalid_argument("--auto: needs at least 1 core, got " + std::to_string(in.cores));
  if (in.batch < 1) throw std::invalid_argument("--auto: needs a batch of at least 1 sample");
  if (!in.layer_costs || !in.allreduce_s || !in.optimizer_s || (!in.nodes.empty() && !in.network_s))
    throw std::invalid_argument("--auto: the planner needs its measurements (with nodes, the network's too)");
  planner p(model, in);
  std::vector<auto_candidate> found = p.candidates();
  if (found.empty()) {
    std::string smallest = "no configuration was predicted";
    if (p.smallest())
      smallest = std::string("the least memory ") + (in.nodes.empty() ? "this process" : "a node") +
                 " is predicted to hold is " + memory_text(p.smallest()->peak_bytes) +
                 ", with " + describe(p.smallest()->config);
    const std::string where = in.nodes.empty() ? plural(in.cores, "core") : plural(static_cast<int>(in.nodes.size()), "node");
    throw std::invalid_argument("--auto: no configuration on " + where + " fits --max-memory " +
                                memory_text(in.budget) + (in.nodes.empty() ? "" : " per node") + ": " + smallest +
                                (in.nodes.empty() ? " (a smaller --batch-size, --dtype bf16, or nodes would need less here)"
                                                  : " (a smaller --batch-size, --dtype bf16, or more nodes would need less)"));
  }
  std::stable_sort(found.begin(), found.end(), [](const auto_candidate& a, const auto_candidate& b) {
    if (a.step_s != b.step_s) return a.step_s < b.step_s;
    return a.config.ranks() < b.config.ranks();
  });
  return found;
}

std::vector<int> tensor_parallel_sizes(sequential& model, int cores) {
  std::vector<int> sizes;
  const std::vector<std::string> split = tensor_parallel_specs(model.layer_specs());
  for (int T = 2; T <= cores; T *= 2) {
    sequential copy = sequential::from_layer_specs(split);
    if (tensor_parallel_layers(copy).empty()) break;
    local_group group("--auto's check of T = " + std::to_string(T), T);
    try {
      join_tensor_parallel(copy, group.member(0));  // refuses a width or head count T does not divide
      sizes.push_back(T);
    } catch (const std::invalid_argument&) {
    }
  }
  return sizes;
}

double measure_local_allreduce_s(int ranks, std::uint64_t bytes, int repeats) {
  if (ranks < 2) return 0.0;
  const auto elements = static_cast<std::size_t>(std::max<std::uint64_t>(1, bytes / 4));
  local_group group("--auto's all-reduce measurement", ranks);
  std::vector<double> seconds;
  std::vector<std::thread> threads;
  std::vector<std::unique_ptr<process_group>> members;
  for (int r = 0; r < ranks; ++r) members.push_back(group.member(r));
  for (int rep = 0; rep <= repeats; ++rep) {  // rep 0 warms up
    const auto t0 = std::chrono::steady_clock::now();
    for (int r = 1; r < ranks; ++r)
      threads.emplace_back([&, r] {
        tensor t = zeros({elements});
        members[static_cast<std::size_t>(r)]->all_reduce(t).wait();
      });
    tensor mine = zeros({elements});
    members[0]->all_reduce(mine).wait();
    for (auto& t : threads) t.join();
    threads.clear();
    if (rep > 0) seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(seconds.begin(), seconds.end());
  return seconds[seconds.size() / 2];
}

std::string predicted_step_check(const auto_candidate& chosen, double measured_step_s,
                                 const std::vector<double>& busy_s) {
  const std::vector<double>& predicted_busy_s = chosen.busy_s;
  const double ratio = measured_step_s / chosen.step_s;
  if (!(chosen.step_s > 0.0) || std::abs(ratio - 1.0) <= 0.15) return "";
  char head[160];
  std::snprintf(head, sizeof head, "measured %.2f ms per step against the predicted %.2f ms (%+.0f%%): ",
                measured_step_s * 1e3, chosen.step_s * 1e3, (ratio - 1.0) * 100.0);
  char why[320];
  if (!busy_s.empty() && busy_s.size() == predicted_busy_s.size()) {
    std::size_t worst = 0;
    double off = 0.0;
    for (std::size_t s = 0; s < busy_s.size(); ++s) {
      const double e = predicted_busy_s[s] > 0.0 ? std::abs(busy_s[s] / predicted_busy_s[s] - 1.0) : 0.0;
      if (e > off) off = e, worst = s;
    }
    if (off > 0.15)
      std::snprintf(why, sizeof why,
                    "stage %zu computed %.2f ms per step, predicted %.2f: its layer costs, measured one layer at a "
                    "time, were off",
                    worst, busy_s[worst] * 1e3, predicted_busy_s[worst] * 1e3);
    else
      std::snprintf(why, sizeof why,
                    "every stage computed within 15%% of its prediction, so the waits were off: the bubble and the "
                    "messages between stages (estimated at %.0f us each)%s",
                    chosen.message_s * 1e6, chosen.communication_s > 0 ? ", or the all-reduces" : "");
  } else if (chosen.communication_s > 0.15 * chosen.step_s) {
    std::snprintf(why, sizeof why,
                  "the all-reduces (%.2f ms of the prediction, measured alone) or the compute (%.2f ms) were off",
                  chosen.communication_s * 1e3, chosen.compute_s * 1e3);
  } else {
    std::snprintf(why, sizeof why, "the compute (%.2f ms): its layer costs, measured one layer at a time, were off",
                  chosen.compute_s * 1e3);
  }
  return std::string(head) + why;
}

}  // namespace ap

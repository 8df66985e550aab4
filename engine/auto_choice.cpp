// --auto: the mesh chosen for the model, batch, cores and --max-memory (Note [automatic configuration]), and
// afterwards its prediction against the run.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <tuple>

#include "actors/node_probe.hpp"
#include "network/activation_links.hpp"
#include "engine/engine_parts.hpp"
#include "plan/cores.hpp"
#include "tensor/compute.hpp"

namespace ap::engine_parts {

// The planner's measurements, each taken once: layer costs per (rows, threads, recompute) and a line a + b x bytes
// per all-reduce group size. Beyond this machine's cores, costs are scaled (Note [auto on nodes]).
class machine_measurements {
 public:
  machine_measurements(const train_plan& plan, const optimizer_config& optimizer)
      : plan_(plan), optimizer_(optimizer), cores_(std::max<int>(1, static_cast<int>(process_cores().size()))) {}

  const std::vector<layer_cost>& layer_costs(std::size_t rows, int threads, recompute_mode rc) {
    const auto key = std::make_tuple(rows, threads, rc);
    auto it = costs_.find(key);
    if (it != costs_.end()) return it->second;
    std::vector<layer_cost> costs;
    if (threads > cores_) {
      costs = layer_costs(rows, cores_, rc);
      const double scale = static_cast<double>(cores_) / threads;
      for (layer_cost& c : costs) c.forward_s *= scale, c.backward_input_s *= scale, c.backward_weight_s *= scale;
    } else {
      sequential model = plan_.model.clone();
      model.set_recompute(rc);
      costs = measure_layer_costs(model, first_rows(*plan_.train_set, rows).inputs, 3, threads);
    }
    return costs_.emplace(key, std::move(costs)).first->second;
  }

  double allreduce_s(int ranks, std::uint64_t bytes) {
    if (ranks < 2) return 0.0;
    auto it = lines_.find(ranks);
    if (it == lines_.end()) {
      constexpr double small = 64 << 10, large = 4 << 20;
      const double a = measure_local_allreduce_s(ranks, static_cast<std::uint64_t>(small));
      const double b = measure_local_allreduce_s(ranks, static_cast<std::uint64_t>(large));
      const double per_byte = std::max(0.0, (b - a) / (large - small));
      it = lines_.emplace(ranks, std::make_pair(std::max(0.0, a - per_byte * small), per_byte)).first;
    }
    return it->second.first + it->second.second * static_cast<double>(bytes);
  }

  // One optimizer step over every parameter, median of 3 after a warm-up.
  double optimizer_s(int threads) {
    auto it = updates_.find(threads);
    if (it != updates_.end()) return it->second;
    if (threads > cores_) return updates_.emplace(threads, optimizer_s(cores_) * cores_ / threads).first->second;
    set_compute_threads(threads);
    sequential model = plan_.model.clone();
    const std::vector<parameter> parameters = model.parameters();
    const std::unique_ptr<optimizer> update = make_optimizer(optimizer_);
    std::vector<double> seconds;
    for (int r = 0; r <= 3; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      update->step(parameters);
      if (r > 0) seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(seconds.begin(), seconds.end());
    return updates_.emplace(threads, seconds[1]).first->second;
  }

  std::size_t measured() const { return costs_.size(); }

 private:
  const train_plan& plan_;
  optimizer_config optimizer_;
  int cores_;
  std::map<int, double> updates_;
  std::map<std::tuple<std::size_t, int, recompute_mode>, std::vector<layer_cost>> costs_;
  std::map<int, std::pair<double, double>> lines_;  // ranks -> (a, b)
};

namespace {

std::string ms_text(double seconds) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f ms", seconds * 1e3);
  return text;
}

// The options and plan that train `c`: its mesh, and a pipeline's layer costs for the chosen microbatch size.
void apply(const auto_candidate& c, machine_measurements& measure, run_config& o, train_plan& plan) {
  o.stages = c.config.stages;
  o.threads = c.config.threads;
  o.mesh.data_parallel = c.config.data_parallel;
  o.mesh.tensor_parallel = c.config.tensor_parallel;
  o.recompute = recompute_mode_name(c.config.recompute);
  plan.model.set_recompute(c.config.recompute);
  plan.layer_costs.clear();
  if (c.config.stages == 0) return;
  o.pipe.microbatches = c.config.microbatches;
  o.pipe.schedule = c.config.schedule;
  o.pipe.chunks_per_stage = c.config.chunks;
  o.pipe.layers_per_chunk = c.config.layers_per_chunk;
  o.partition = "time";
  const auto per = static_cast<std::size_t>(c.config.data_parallel * c.config.microbatches);
  plan.layer_costs = measure.layer_costs(o.train.batch_size / per, c.config.threads, c.config.recompute);
}

// Quiets the plan's log while it lives.
class quiet_log {
 public:
  explicit quiet_log(train_plan& plan) : plan_(plan), saved_(std::move(plan.log)) { plan.log = nullptr; }
  ~quiet_log() { plan_.log = std::move(saved_); }
  quiet_log(const quiet_log&) = delete;
  quiet_log& operator=(const quiet_log&) = delete;

 private:
  train_plan& plan_;
  log_sink saved_;
};

// Note [auto trials]: the prediction misses what no layer alone shows (thread hand-overs, shared caches, busy
// cores), differently per mesh. So --auto runs the best --auto-trials predictions for a few steps and trains
// with the fastest measured. A trial is the median of `steps` steps after a warm-up; the model is put back, so
// the run starts from the same weights.
double trial_step_s(const run_config& o, train_plan& plan, machine_measurements& measure, const auto_candidate& c,
                    int steps) {
  run_config t = o;
  t.trace_file.clear(), t.timeline_file.clear(), t.stage_log = false, t.max_memory.clear();
  sequential original = plan.model.clone();
  const batch first = first_rows(*plan.train_set, o.train.batch_size);
  const tensor& inputs = first.inputs;
  const tensor& labels = first.labels;
  std::vector<double> seconds;
  {
    quiet_log quiet(plan);
    apply(c, measure, t, plan);
    train_runner r = build_train_runner(t, plan, make_mesh_runner(t, plan, plan.model));
    for (int s = 0; s <= steps; ++s) {
      const auto t0 = std::chrono::steady_clock::now();
      r.runner->train_step(inputs, labels, static_cast<std::uint64_t>(s));
      if (s > 0) seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
  }
  plan.model = std::move(original);
  set_compute_threads(1);
  std::sort(seconds.begin(), seconds.end());
  return seconds[seconds.size() / 2];
}

// What the planner knows: the run, the measurements, and on nodes their survey (Note [auto on nodes]); `where`
// names the cores or nodes planned for.
auto_inputs planner_inputs(const run_config& o, const train_plan& plan, machine_measurements& measure,
                           const std::vector<std::string>& nodes, std::string& where) {
  auto_inputs in;
  in.batch = o.train.batch_size;
  in.cores = static_cast<int>(process_cores().size());
  in.budget = o.max_memory.empty() ? 0 : parse_memory_size(o.max_memory);
  in.optimizer = o.optimizer;
  in.layer_costs = [&measure](std::size_t rows, int threads, recompute_mode rc) -> const std::vector<layer_cost>& {
    return measure.layer_costs(rows, threads, rc);
  };
  in.allreduce_s = [&measure](int ranks, std::uint64_t bytes) { return measure.allreduce_s(ranks, bytes); };
  in.optimizer_s = [&measure](int threads) { return measure.optimizer_s(threads); };
  where = std::to_string(in.cores) + " cores";
  if (!nodes.empty()) {  // Note [auto on nodes]
    const node_survey survey = survey_nodes(nodes, o.pipe.security, std::chrono::milliseconds(o.timeout_ms));
    where.clear();
    for (const node_machine& n : survey.nodes) {
      in.nodes.push_back(auto_node{n.host, n.cores, n.threads});
      where += (where.empty() ? "nodes " : ", ") + n.address + " (" + std::to_string(n.cores) + " cores" +
               (n.threads > 0 ? ", --threads " + std::to_string(n.threads) : "") + ")";
    }
    in.network_s = [line = survey.network](std::uint64_t bytes) { return line.seconds(bytes); };
    in.link_s = [line = survey.links](std::uint64_t bytes) { return line.seconds(bytes); };
    if (survey.copies) in.copy_s = [line = *survey.copies](std::uint64_t bytes) { return line.seconds(bytes); };
    in.link_bytes = inline_bytes;  // Note [activations on data links]
    in.sample_bytes = first_rows(*plan.train_set, 1).inputs.byte_size();
    char network[200];
    std::snprintf(network, sizeof network,
                  "auto: a message between processes: %.0f us + %.2f ms a megabyte, on a data link %.0f us + %.2f ms (measured)\n",
                  survey.network.latency_s * 1e6, survey.network.per_byte_s * 1e9, survey.links.latency_s * 1e6,
                  survey.links.per_byte_s * 1e9);
    say(plan) << network;
    if (survey.copies) {
      std::snprintf(network, sizeof network,
                    "auto: between nodes of one machine, copied out of the sender's memory: %.0f us + %.2f ms a megabyte (measured)\n",
                    survey.copies->latency_s * 1e6, survey.copies->per_byte_s * 1e9);
      say(plan) << network;
    }
  }
  return in;
}

}  // namespace

void choose_configuration(run_config& o, train_plan& plan) {
  const auto started = std::chrono::steady_clock::now();
  plan.measured = std::make_shared<machine_measurements>(plan, o.optimizer);
  machine_measurements& measure = *plan.measured;
  std::vector<std::string> nodes = o.pipe.nodes;
  if (o.elastic > 0 && !nodes.empty()) {  // an elastic run starts on the nodes that answer (Note [elastic runs])
    std::vector<std::string> answering = nodes_answering(nodes, o.pipe.security, elastic_probe_wait(o));
    if (!answering.empty()) nodes = std::move(answering);
  }
  std::string where;
  const auto_inputs in = planner_inputs(o, plan, measure, nodes, where);
  const std::vector<auto_candidate> ranked = rank_configurations(plan.model, in);
  set_compute_threads(1);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();

  say(plan) << "auto: " << ranked.size() << " configurations fit " << where
            << (in.budget ? " and --max-memory " + memory_text(in.budget) : std::string(" (no memory budget)"))
            << "; predicted from " << measure.measured() << " layer-cost measurements (" << ms_text(took)
            << " in all):\n";
  const double samples = static_cast<double>(in.batch);
  for (std::size_t i = 0; i < std::min<std::size_t>(5, ranked.size()); ++i) {
    const auto_candidate& c = ranked[i];
    say(plan) << "  " << i + 1 << ". " << describe(c.config) << ": " << ms_text(c.step_s) << " per step ("
              << static_cast<long>(samples / c.step_s) << " samples/s), peak " << memory_text(c.peak_bytes) << "\n";
  }
  run_config on = o;  // trials on the nodes planned for
  on.pipe.nodes = nodes;
  std::size_t best = 0;  // Note [auto trials]
  const std::size_t trials = std::min<std::size_t>(static_cast<std::size_t>(o.auto_trials), ranked.size());
  double fastest = 0.0;
  for (std::size_t i = 0; i < trials; ++i) {
    const double s = trial_step_s(on, plan, measure, ranked[i], 3);
    say(plan) << "auto: tried " << i + 1 << ": " << ms_text(s) << " per step (predicted " << ms_text(ranked[i].step_s)
              << ")\n";
    if (i == 0 || s < fastest) best = i, fastest = s;
  }
  say(plan) << "auto: training with " << best + 1 << ". " << describe(ranked[best].config) << "\n";
  apply_choice(ranked[best], o, plan);
}

std::optional<auto_candidate> choose_on_nodes(const run_config& o, train_plan& plan,
                                              const std::vector<std::string>& nodes) {
  if (!plan.measured) plan.measured = std::make_shared<machine_measurements>(plan, o.optimizer);
  std::string where = std::to_string(nodes.size()) + " nodes";
  try {
    const std::vector<auto_candidate> ranked = rank_configurations(plan.model, planner_inputs(o, plan, *plan.measured, nodes, where));
    set_compute_threads(1);
    say(plan) << "auto: on " << where << ": " << describe(ranked.front().config) << ", "
              << ms_text(ranked.front().step_s) << " per step predicted\n";
    return ranked.front();
  } catch (const std::exception& e) {
    set_compute_threads(1);
    say(plan) << "auto: nothing fits " << where << ": " << e.what() << "\n";
    return std::nullopt;
  }
}

void apply_choice(const auto_candidate& c, run_config& o, train_plan& plan) {
  apply(c, *plan.measured, o, plan);
  plan.auto_choice = c;
}

void report_auto_early(const train_plan& plan, const auto_candidate& chosen, std::vector<double> step_ends) {
  std::vector<double> steps;
  for (std::size_t i = 1; i < step_ends.size(); ++i) steps.push_back(step_ends[i] - step_ends[i - 1]);
  if (steps.empty()) return;
  std::sort(steps.begin(), steps.end());
  const double measured = steps[steps.size() / 2];
  const std::string off = predicted_step_check(chosen, measured, {});
  say(plan) << "auto: after " << step_ends.size() << " steps: " << ms_text(measured) << " per step, predicted "
            << ms_text(chosen.step_s) << (off.empty() ? " (within 15%)" : "") << "\n";
}

void report_auto(const train_plan& plan, const train_runner& runner, const train_report& report, nlohmann::json& out) {
  if (!plan.auto_choice || report.steps == 0) return;
  const auto_candidate& chosen = *plan.auto_choice;
  const double measured = report.median_step_s;
  std::vector<double> busy;
  if (runner.pipe) {
    busy = runner.pipe->busy_seconds();
    for (double& b : busy) b /= static_cast<double>(report.steps);
  }
  const std::string off = predicted_step_check(chosen, measured, busy);
  say(plan) << "auto: " << describe(chosen.config) << ": predicted " << ms_text(chosen.step_s) << " per step, measured "
            << ms_text(measured) << (off.empty() ? " (within 15%)" : "") << "\n";
  if (!off.empty()) say(plan) << "auto: " << off << "\n";
  const mesh_config& m = chosen.config;
  out["auto"] = {{"choice", describe(m)},
                 {"stages", m.stages},
                 {"microbatches", m.microbatches},
                 {"schedule", m.schedule},
                 {"chunks", m.chunks},
                 {"layers_per_chunk", m.layers_per_chunk},
                 {"data_parallel", m.data_parallel},
                 {"tensor_parallel", m.tensor_parallel},
                 {"threads", m.threads},
                 {"nodes", m.nodes},
                 {"recompute", recompute_mode_name(m.recompute)},
                 {"predicted_step_s", chosen.step_s},
                 {"measured_step_s", measured},
                 {"predicted_peak_bytes", chosen.peak_bytes},
                 {"off", off}};
}

}  // namespace ap::engine_parts

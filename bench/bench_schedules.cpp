// bench_schedules: what each pipeline schedule gives and what the actor runtime costs: real training on 2 stages
// with every schedule against the simulator (train); the runtime's overhead on sleeping stages against simulated
// makespans (overhead); a stage's task queue against CAF's mailbox with `skip` (mailbox).
//
// Usage: bench_schedules [train|overhead|mailbox] [OPTIONS]   (--help lists each mode's options)
#include <sys/prctl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include <caf/all.hpp>
#include <nlohmann/json.hpp>

#include "actors/messages.hpp"
#include "actors/pipeline.hpp"
#include "actors/scheduler_config.hpp"
#include "bench/bench_support.hpp"
#include "data/dataset.hpp"
#include "data/fashion_mnist.hpp"
#include "data/synthetic.hpp"
#include "plan/partition.hpp"
#include "schedule/schedule.hpp"
#include "stage/task_queue.hpp"
#include "tensor/compute.hpp"
#include "training/trainer.hpp"

namespace {

using ap::bench::load_average;
using ap::bench::median;
using ap::bench::percentile;

// ---- train: real training on a 2-stage pipeline, every schedule: throughput and stashed activations
// A Fashion-MNIST MLP, one thread per stage, 8 microbatches, with every schedule: samples/s, the peak stashed
// activations per stage (= simulator), and each stage's busy time beside the simulated step time, against the
// single-process step. Runners alternate in blocks (Note [alternating blocks]).
namespace training {

const char* model_spec = "784-2048-2048-2048-10";
constexpr std::size_t batch_size = 256;


struct run_result {
  std::string schedule;
  int chunks = 1;
  std::vector<std::size_t> layers_per_chunk;
  std::size_t samples = 0;
  double wall_s = 0.0, step_ms = 0.0, min_step_ms = 0.0, simulated_ms = 0.0, mean_loss = 0.0;
  std::vector<int> peak_stash, simulated_peak_stash;
  std::vector<double> busy_ms;  // per stage, median per step
  double samples_per_s() const { return wall_s > 0 ? double(samples) / wall_s : 0.0; }
  double samples_per_s_median() const { return step_ms > 0 ? double(batch_size) / (step_ms / 1e3) : 0.0; }
};

// One way to train a step and what its steps measured.
struct runner {
  run_result result;
  std::function<float(const ap::batch&, int)> step;  // one train step on a batch, step number
  std::function<void(run_result&)> finish;
  std::vector<double> times_ms;
  double loss_sum = 0.0;
  int steps_taken = 0;
};

// Note [alternating blocks]: the machine may be shared, so after every runner's warm-up the timed steps run in
// blocks of `block` steps per runner in turn: a burst of foreign load hits all schedules alike. Every runner sees
// the same batches in the same order.
void run_alternating(std::vector<runner>& runners, const ap::dataset& data, int warmup, int steps, int block) {
  const auto order = ap::epoch_order(data.size(), 1, 0);
  auto take_step = [&](runner& r, bool timed) {
    const int s = r.steps_taken++;
    const ap::batch b = ap::make_batch(data, order, static_cast<std::size_t>(s), batch_size);
    const auto t0 = std::chrono::steady_clock::now();
    const float loss = r.step(b, s);
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (!timed) return;
    r.times_ms.push_back(ms);
    r.result.wall_s += ms / 1e3;
    r.result.samples += ap::rows(b.inputs);
    r.loss_sum += loss;
  };
  for (auto& r : runners)
    for (int s = 0; s < warmup; ++s) take_step(r, false);
  for (int done = 0; done < steps; done += block)
    for (auto& r : runners)
      for (int k = 0; k < block && done + k < steps; ++k) take_step(r, true);
  for (auto& r : runners) {
    r.result.step_ms = median(r.times_ms);
    r.result.min_step_ms = *std::min_element(r.times_ms.begin(), r.times_ms.end());
    r.result.mean_loss = r.loss_sum / steps;
    if (r.finish) r.finish(r.result);
  }
}

// A pipeline runner; the pipeline lives as long as the runner's functions.
runner pipeline_runner(const std::string& schedule, int microbatches, ap::partition_method method,
                       const ap::sequential& model, const std::vector<ap::layer_cost>& costs) {
  runner r;
  r.result.schedule = schedule;
  r.result.chunks = schedule == "interleaved" ? 2 : 1;
  ap::pipeline_options o;
  o.stages = 2;
  o.microbatches = microbatches;
  o.chunks_per_stage = r.result.chunks;
  o.schedule = schedule;
  o.optimizer.kind = "adam";
  o.optimizer.lr = 1e-3f;
  o.record_events = true;
  o.layers_per_chunk = ap::partition_counts(method, model, costs, o.stages * r.result.chunks);
  auto pipe = std::make_shared<ap::pipeline>(model, o);
  r.result.layers_per_chunk = ap::chunk_layer_counts(pipe->chunk_ranges());
  const ap::simulation sim = ap::simulate(pipe->schedule(), ap::simulation_costs(costs, pipe->chunk_ranges(), o.stages));
  r.result.simulated_ms = sim.makespan * 1e3;
  r.result.simulated_peak_stash = sim.peak_stash;
  auto busy = std::make_shared<std::vector<std::vector<double>>>(static_cast<std::size_t>(o.stages));
  r.step = [pipe, busy, stages = o.stages](const ap::batch& b, int s) {
    pipe->clear_events();
    const float loss = pipe->train_step(b.inputs, b.labels, static_cast<std::uint64_t>(s));
    const auto per_stage = ap::busy_time_us(pipe->events(), stages);
    for (std::size_t st = 0; st < per_stage.size(); ++st) (*busy)[st].push_back(per_stage[st] / 1e3);
    return loss;
  };
  r.finish = [pipe, busy](run_result& out) {
    out.peak_stash = pipe->last_peak_stash();
    for (const auto& b : *busy) out.busy_ms.push_back(median(b));
  };
  return r;
}

int run(ap::bench::arguments& args) {
  const int steps = static_cast<int>(args.integer("--steps", 30, 1)), warmup = static_cast<int>(args.integer("--warmup", 3));
  const int microbatches = static_cast<int>(args.integer("--microbatches", 8, 1)), block = static_cast<int>(args.integer("--block", 5, 1));
  const std::string dir = args.text("--data", ap::default_fashion_mnist_dir), partition = args.text("--partition", "uniform");
  const bool single = !args.flag("--no-single");
  args.done();
  ap::partition_method method;
  try {
    method = ap::parse_partition_method(partition);
  } catch (const std::exception& e) {
    throw ap::bench::usage_error(e.what());
  }
  ap::set_compute_threads(1);
  const ap::dataset data = ap::load_fashion_mnist("train", dir);
  const ap::sequential model = ap::sequential::from_spec(model_spec);
  const std::size_t rows = (batch_size + static_cast<std::size_t>(microbatches) - 1) / static_cast<std::size_t>(microbatches);
  const auto costs = ap::measure_layer_costs(model, ap::slice_rows(data.inputs, 0, rows), 11);

  const std::string load_before = load_average();
  std::printf("2-stage training of %s on Fashion-MNIST, batch %zu, m=%d, Adam, partition %s, %d steps after %d"
              " warm-up; load average before: %s\n",
              model_spec, batch_size, microbatches, partition.c_str(), steps, warmup, load_before.c_str());
  std::fflush(stdout);

  std::vector<runner> runners;
  if (single) {
    auto local_model = std::make_shared<ap::sequential>(model.clone());
    ap::optimizer_config adam;
    adam.kind = "adam";
    adam.lr = 1e-3f;
    auto local = std::make_shared<ap::local_runner>(*local_model, adam);
    runner r;
    r.result.schedule = "single";
    r.step = [local_model, local](const ap::batch& b, int s) {
      return local->train_step(b.inputs, b.labels, static_cast<std::uint64_t>(s));
    };
    runners.push_back(std::move(r));
  }
  for (const std::string& schedule : ap::schedule_names())
    runners.push_back(pipeline_runner(schedule, microbatches, method, model, costs));
  run_alternating(runners, data, warmup, steps, block);
  run_result reference;
  std::vector<run_result> results;
  for (const auto& r : runners) {
    if (r.result.schedule == "single") reference = r.result;
    else results.push_back(r.result);
  }
  const std::string load_after = load_average();

  auto counts_text = [](const std::vector<std::size_t>& c) {
    std::string s;
    for (std::size_t x : c) s += (s.empty() ? "" : ",") + std::to_string(x);
    return s;
  };
  std::printf("\n%-12s %2s %-8s %10s %10s %9s %9s %9s %-11s %-11s %-17s %7s\n", "schedule", "v", "layers",
              "samples/s", "samples/s", "step ms", "min ms", "sim ms", "peak stash", "(simulated)", "busy ms/stage",
              "loss");
  std::printf("%-12s %2s %-8s %10s %10s %9s %9s %9s\n", "", "", "/chunk", "(run)", "(median)", "(median)", "", "");
  if (single)
    std::printf("%-12s %2s %-8s %10.0f %10.0f %9.1f %9.1f %9s %-11s %-11s %-17s %7.4f\n", "single", "-", "all",
                reference.samples_per_s(), reference.samples_per_s_median(), reference.step_ms, reference.min_step_ms,
                "", "", "", "", reference.mean_loss);
  for (const auto& r : results) {
    auto ints = [](const std::vector<int>& v) {
      std::string s;
      for (int x : v) s += (s.empty() ? "" : " ") + std::to_string(x);
      return s;
    };
    char busy[64];
    std::snprintf(busy, sizeof busy, "%.1f %.1f", r.busy_ms.at(0), r.busy_ms.at(1));
    std::printf("%-12s %2d %-8s %10.0f %10.0f %9.1f %9.1f %9.1f %-11s %-11s %-17s %7.4f\n", r.schedule.c_str(),
                r.chunks, counts_text(r.layers_per_chunk).c_str(), r.samples_per_s(), r.samples_per_s_median(),
                r.step_ms, r.min_step_ms, r.simulated_ms, ints(r.peak_stash).c_str(),
                ints(r.simulated_peak_stash).c_str(), busy, r.mean_loss);
  }
  std::printf("layer costs measured alone (ms, one microbatch of %zu rows, F / I / W):", rows);
  for (std::size_t l = 0; l < costs.size(); ++l)
    std::printf(" %zu:%.2f/%.2f/%.2f", l, costs[l].forward_s * 1e3, costs[l].backward_input_s * 1e3,
                costs[l].backward_weight_s * 1e3);
  std::printf("\nload average after: %s (above the core count: another process competed for the cores)\n",
              load_after.c_str());

  nlohmann::json j = {{"bench", "bench_schedules train"}, {"model", model_spec},      {"batch_size", batch_size},
                      {"stages", 2},          {"microbatches", microbatches}, {"partition", partition},
                      {"steps", steps},       {"warmup", warmup},         {"load_before", load_before},
                      {"load_after", load_after}};
  if (single)
    j["single"] = {{"samples_per_s", reference.samples_per_s()},
                   {"samples_per_s_median_step", reference.samples_per_s_median()},
                   {"step_ms", reference.step_ms}};
  for (const auto& r : results)
    j["schedules"].push_back({{"schedule", r.schedule},
                              {"chunks_per_stage", r.chunks},
                              {"layers_per_chunk", r.layers_per_chunk},
                              {"samples_per_s", r.samples_per_s()},
                              {"samples_per_s_median_step", r.samples_per_s_median()},
                              {"step_ms", r.step_ms},
                              {"step_min_ms", r.min_step_ms},
                              {"simulated_ms", r.simulated_ms},
                              {"peak_stash", r.peak_stash},
                              {"simulated_peak_stash", r.simulated_peak_stash},
                              {"busy_ms", r.busy_ms},
                              {"mean_loss", r.mean_loss}});
  std::printf("%s\n", j.dump().c_str());
  return 0;
  return 0;
}

}  // namespace training

// ---- overhead: the actor runtime's own overhead, measured makespan / simulated makespan, on sleeping stages
// Every stage is sleep layers of F ms forward and B ms backward (wall time without CPU). For p = 4, m = 8 and 16
// and every schedule: step (train_step wall time), span, sim (ap::simulate), ratio step / sim and the bubble;
// Note [where the time goes] splits the difference.
//
// Note [the first layer's input gradient]: chunk 0's first layer skips backward_input (the model input needs no
// gradient), so a sleep layer there would make stage 0's backward short; a zero-time sleep:0:0 layer goes first.
//
// Note [timer slack]: Linux lengthens every sleep by the thread's timer slack (50 us) to batch wake-ups, which
// would be charged to the runtime. The slack is set to 1 ns before the pipeline's threads start (they inherit
// it), unless --default-slack; the calibrated column removes the sleeps' remaining inaccuracy.
namespace overhead {

std::string ms_text(double ms) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", ms);
  return buf;
}

// sleep:0:0 first, then one sleep layer per chunk (Note [the first layer's input gradient]).
ap::sequential sleep_model(int chunks, double forward_ms, double backward_ms, std::vector<std::size_t>& counts) {
  ap::sequential model;
  model.add(ap::make_layer("sleep:0:0"));
  for (int c = 0; c < chunks; ++c) model.add(ap::make_layer("sleep:" + ms_text(forward_ms) + ":" + ms_text(backward_ms)));
  counts.assign(static_cast<std::size_t>(chunks), 1);
  counts[0] = 2;
  return model;
}

double formula_bubble(const std::string& schedule, int p, int m, int v) {
  if (schedule == "interleaved") return double(p - 1) / double(v * m);
  if (schedule == "zb-h1") return double(p - 1) / double(3 * m);
  return double(p - 1) / double(m);  // gpipe, 1f1b
}

// Note [where the time goes]: each timed step's event log gives every task's start, finish and message arrival,
// and these latencies (us): hop (a task's finish to its result's arrival at the next stage), loss (the last
// forward's finish to its gradient's return through the coordinator), dispatch (a task's start after the later
// of its arrival and the stage's previous finish), edges (step - span). Walking the critical path back from the
// last task (each task waited for the later of its arrival and its stage's previous finish), the span splits
// exactly into nominal compute + sleep excess + hops + loss hops + dispatches.
struct ran_task {
  int stage = 0;
  ap::op kind = ap::op::forward;
  int microbatch = 0, chunk = 0;
  double start = 0, finish = 0;
  double arrival = -1;  // its message's arrival; -1 for W
  int previous = -1;      // the stage's previous task
  int producer = -1;  // the task whose result it consumes; -1: the coordinator's input
  bool via_loss = false;  // the producer is the last forward, through the loss
};

std::vector<ran_task> tasks_of(const std::vector<ap::stage_event>& events, int total_chunks) {
  using key = std::tuple<int, int, int>;  // class (0 forward, 1 backward), microbatch, chunk
  std::vector<ran_task> tasks;
  std::map<int, int> open, last_on_stage;
  std::map<key, double> arrived;
  std::map<key, int> produced;
  for (const auto& e : events) {
    const key k{e.task == ap::op::forward ? 0 : 1, e.microbatch, e.chunk};
    if (e.kind == ap::event_kind::arrive) arrived[k] = e.time_us;
    if (e.kind == ap::event_kind::start) {
      ran_task t;
      t.stage = e.stage, t.kind = e.task, t.microbatch = e.microbatch, t.chunk = e.chunk, t.start = e.time_us;
      t.previous = last_on_stage.count(e.stage) ? last_on_stage[e.stage] : -1;
      open[e.stage] = last_on_stage[e.stage] = static_cast<int>(tasks.size());
      tasks.push_back(t);
    }
    if (e.kind == ap::event_kind::finish && open.count(e.stage)) {
      tasks[static_cast<std::size_t>(open[e.stage])].finish = e.time_us;
      if (ap::runs_on_arrival(e.task)) produced[k] = open[e.stage];
    }
  }
  for (auto& t : tasks) {
    if (t.kind == ap::op::backward_weight) continue;
    const bool forward = t.kind == ap::op::forward;
    if (auto it = arrived.find({forward ? 0 : 1, t.microbatch, t.chunk}); it != arrived.end()) t.arrival = it->second;
    key from{forward ? 0 : 1, t.microbatch, forward ? t.chunk - 1 : t.chunk + 1};
    if (!forward && t.chunk == total_chunks - 1) from = {0, t.microbatch, t.chunk}, t.via_loss = true;
    if (auto it = produced.find(from); it != produced.end()) t.producer = it->second;
  }
  return tasks;
}

struct latencies {
  std::vector<double> hop, loss, dispatch;
};

// The critical path of one step, split as in Note [where the time goes]; microseconds.
struct critical_path {
  int tasks = 0;
  double nominal = 0, excess = 0, hop = 0, loss = 0, dispatch = 0;
};

critical_path walk_back(const std::vector<ran_task>& tasks, const std::function<double(const ran_task&)>& nominal_us) {
  critical_path path;
  if (tasks.empty()) return path;
  int at = 0;
  for (int i = 0; i < static_cast<int>(tasks.size()); ++i)
    if (tasks[static_cast<std::size_t>(i)].finish > tasks[static_cast<std::size_t>(at)].finish) at = i;
  while (at >= 0) {
    const ran_task& t = tasks[static_cast<std::size_t>(at)];
    ++path.tasks;
    path.nominal += nominal_us(t);
    path.excess += t.finish - t.start - nominal_us(t);
    const double stage_free = t.previous >= 0 ? tasks[static_cast<std::size_t>(t.previous)].finish : -1e300;
    if (t.producer >= 0 && t.arrival > stage_free) {
      const double hop = t.arrival - tasks[static_cast<std::size_t>(t.producer)].finish;
      (t.via_loss ? path.loss : path.hop) += hop;
      path.dispatch += t.start - t.arrival;
      at = t.producer;
    } else if (t.previous >= 0) {
      path.dispatch += t.start - stage_free;
      at = t.previous;
    } else {
      at = -1;  // the step's first task
    }
  }
  return path;
}

void collect_latencies(const std::vector<ran_task>& tasks, latencies& lat) {
  for (const auto& t : tasks) {
    if (t.producer >= 0 && t.arrival >= 0)
      (t.via_loss ? lat.loss : lat.hop).push_back(t.arrival - tasks[static_cast<std::size_t>(t.producer)].finish);
    const double stage_free = t.previous >= 0 ? tasks[static_cast<std::size_t>(t.previous)].finish : -1.0;
    const double ready = std::max(stage_free, t.arrival);
    if (ready >= 0) lat.dispatch.push_back(t.start - ready);
  }
}

struct case_result {
  std::string schedule;
  int stages = 0, microbatches = 0, chunks = 0;
  double step_ms = 0, step_min_ms = 0, span_ms = 0, sim_ms = 0, calibrated_ms = 0, ideal_ms = 0;
  double bubble_formula = 0, bubble_sim = 0;
  double hop_us = 0, hop_p90_us = 0, loss_us = 0, dispatch_us = 0, dispatch_p90_us = 0;
  double edges_us = 0;
  double sleep_excess_us = 0;  // median measured task duration - nominal
  critical_path path;  // medians over steps
  std::vector<int> peak_stash, sim_peak_stash;
  double ratio() const { return step_ms / sim_ms; }
  double bubble() const { return step_ms / ideal_ms - 1.0; }
};

case_result run_case(const std::string& schedule, int p, int m, double forward_ms, double backward_ms, int warmup,
                     int steps) {
  const int v = schedule == "interleaved" ? 2 : 1;
  std::vector<std::size_t> counts;
  const ap::sequential model = sleep_model(p * v, forward_ms / v, backward_ms / v, counts);
  ap::pipeline_options o;
  o.stages = p;
  o.microbatches = m;
  o.chunks_per_stage = v;
  o.schedule = schedule;
  o.layers_per_chunk = counts;
  o.optimizer.kind = "sgd";
  o.record_events = true;
  ap::pipeline pipe(model, o);
  const ap::dataset d = ap::make_blobs(static_cast<std::size_t>(2 * m), 4, 4, 1);

  case_result r;
  r.schedule = schedule, r.stages = p, r.microbatches = m, r.chunks = v;
  ap::op_costs nominal;
  nominal.forward.assign(p, forward_ms);
  nominal.backward_input.assign(p, backward_ms / 2);
  nominal.backward_weight.assign(p, backward_ms / 2);
  const ap::simulation sim = ap::simulate(pipe.schedule(), nominal);
  r.sim_ms = sim.makespan, r.ideal_ms = sim.ideal, r.bubble_sim = sim.bubble, r.sim_peak_stash = sim.peak_stash;
  r.bubble_formula = formula_bubble(schedule, p, m, v);

  // A chunk's task takes 1/v of its stage's.
  auto nominal_us = [&](const ran_task& t) {
    const double stage_ms = t.kind == ap::op::forward ? forward_ms : t.kind == ap::op::backward ? backward_ms : backward_ms / 2;
    return stage_ms / v * 1e3;
  };
  std::vector<double> walls, spans, edges, excess;
  std::map<std::pair<int, ap::op>, std::vector<double>> durations;
  std::vector<critical_path> paths;
  latencies lat;
  for (int s = 0; s < warmup + steps; ++s) {
    pipe.clear_events();
    const auto t0 = std::chrono::steady_clock::now();
    pipe.train_step(d.inputs, d.labels, static_cast<std::uint64_t>(s));
    const double wall = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (s < warmup) continue;
    const std::vector<ran_task> tasks = tasks_of(pipe.events(), p * v);
    double first = 1e300, last = 0;
    for (const auto& t : tasks) {
      first = std::min(first, t.start), last = std::max(last, t.finish);
      durations[{t.stage, t.kind}].push_back((t.finish - t.start) / 1e3);
      excess.push_back(t.finish - t.start - nominal_us(t));
    }
    walls.push_back(wall);
    spans.push_back((last - first) / 1e3);
    edges.push_back(wall - spans.back());
    collect_latencies(tasks, lat);
    paths.push_back(walk_back(tasks, nominal_us));
  }
  r.peak_stash = pipe.last_peak_stash();
  r.step_ms = median(walls);
  r.step_min_ms = *std::min_element(walls.begin(), walls.end());
  r.span_ms = median(spans);
  r.edges_us = median(edges) * 1e3;
  r.hop_us = median(lat.hop), r.hop_p90_us = percentile(lat.hop, 0.9);
  r.loss_us = median(lat.loss);
  r.dispatch_us = median(lat.dispatch), r.dispatch_p90_us = percentile(lat.dispatch, 0.9);
  r.sleep_excess_us = median(excess);
  auto path_median = [&](auto field) {
    std::vector<double> v;
    for (const auto& c : paths) v.push_back(static_cast<double>(c.*field));
    return median(v);
  };
  r.path.tasks = static_cast<int>(path_median(&critical_path::tasks));
  r.path.nominal = path_median(&critical_path::nominal);
  r.path.excess = path_median(&critical_path::excess);
  r.path.hop = path_median(&critical_path::hop);
  r.path.loss = path_median(&critical_path::loss);
  r.path.dispatch = path_median(&critical_path::dispatch);

  // Calibrated: simulated with each stage's median measured duration per op, so step / calibrated is the runtime's
  // share alone.
  ap::op_costs measured = nominal;
  for (int stage = 0; stage < p; ++stage) {
    auto med = [&](ap::op k) { return median(durations[{stage, k}]); };
    measured.forward[stage] = med(ap::op::forward) * v;
    if (schedule == "zb-h1") {
      measured.backward_input[stage] = med(ap::op::backward_input) * v;
      measured.backward_weight[stage] = med(ap::op::backward_weight) * v;
    } else {
      measured.backward_input[stage] = measured.backward_weight[stage] = med(ap::op::backward) * v / 2;
    }
  }
  r.calibrated_ms = ap::simulate(pipe.schedule(), measured).makespan;
  return r;
}

int run(ap::bench::arguments& args) {
  const int steps = static_cast<int>(args.integer("--steps", 5, 1)), warmup = static_cast<int>(args.integer("--warmup", 2));
  const double forward_ms = args.number("--forward-ms", 2.0), backward_ms = args.number("--backward-ms", 4.0);
  const bool default_slack = args.flag("--default-slack");
  args.done();
  if (!default_slack) prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);  // Note [timer slack]
  const long slack_ns = prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0);

  const int p = 4;
  const std::string load_before = load_average();
  std::printf("runtime overhead on sleeping stages: p=%d, F=%g ms, B=%g ms per stage (I=W=B/2), %d steps after %d"
              " warm-up, timer slack %ld ns; load average before: %s\n",
              p, forward_ms, backward_ms, steps, warmup, slack_ns, load_before.c_str());
  std::vector<case_result> results;
  for (int m : {8, 16})
    for (const std::string& schedule : ap::schedule_names()) {
      // A sleep layer sleeps once per call whatever its rows, so sync-backward has nothing to compare here.
      if (schedule == "sync-backward") continue;
      results.push_back(run_case(schedule, p, m, forward_ms, backward_ms, warmup, steps));
      std::fflush(stdout);
    }
  const std::string load_after = load_average();

  std::printf("\n%-12s %3s %3s %8s %8s %8s %8s %9s %7s %7s %8s %8s %8s\n", "schedule", "m", "v", "step ms", "span ms",
              "sim ms", "ratio", "calib ms", "ratio", "bubble", "formula", "sim bub", "ok");
  std::printf("%-12s %3s %3s %8s %8s %8s %8s %9s %7s %7s %8s %8s %8s\n", "", "", "", "(median)", "(median)", "",
              "step/sim", "", "st/cal", "meas.", "", "", "<=1.05");
  bool all_ok = true;
  for (const auto& r : results) {
    const bool ok = r.ratio() <= 1.05;
    all_ok = all_ok && ok;
    std::printf("%-12s %3d %3d %8.2f %8.2f %8.2f %8.3f %9.2f %7.3f %7.3f %8.3f %8.3f %8s\n", r.schedule.c_str(),
                r.microbatches, r.chunks, r.step_ms, r.span_ms, r.sim_ms, r.ratio(), r.calibrated_ms,
                r.step_ms / r.calibrated_ms, r.bubble(), r.bubble_formula, r.bubble_sim, ok ? "yes" : "NO");
  }
  std::printf("\nwhere the time goes (Note [where the time goes]); per task, microseconds, median (p90):\n");
  std::printf("%-12s %3s %8s %15s %8s %15s   peak stash per stage\n", "schedule", "m", "overshoot", "hop", "loss",
              "dispatch");
  for (const auto& r : results) {
    std::printf("%-12s %3d %8.0f %7.0f (%5.0f) %8.0f %7.0f (%5.0f)  ", r.schedule.c_str(), r.microbatches,
                r.sleep_excess_us, r.hop_us, r.hop_p90_us, r.loss_us, r.dispatch_us, r.dispatch_p90_us);
    for (int s : r.peak_stash) std::printf(" %d", s);
    std::printf(r.peak_stash == r.sim_peak_stash ? " (= simulated)\n" : " (simulated differs)\n");
  }
  std::printf("\nthe critical path of a step, ms (medians over steps): span = nominal + overshoot + hops + loss hops"
              " + dispatches; step = span + edges\n");
  std::printf("%-12s %3s %6s %8s %9s %8s %8s %9s %8s %8s %8s\n", "schedule", "m", "tasks", "nominal", "overshoot",
              "hops", "loss", "dispatch", "span", "edges", "sim");
  for (const auto& r : results)
    std::printf("%-12s %3d %6d %8.2f %9.2f %8.2f %8.2f %9.2f %8.2f %8.2f %8.2f\n", r.schedule.c_str(), r.microbatches,
                r.path.tasks, r.path.nominal / 1e3, r.path.excess / 1e3, r.path.hop / 1e3, r.path.loss / 1e3,
                r.path.dispatch / 1e3, r.span_ms, r.edges_us / 1e3, r.sim_ms);
  std::printf("load average after: %s; target ratio <= 1.05 %s\n", load_after.c_str(),
              all_ok ? "met by every schedule" : "NOT met by every schedule");

  nlohmann::json j = {{"bench", "bench_schedules overhead"}, {"stages", p}, {"forward_ms", forward_ms},
                      {"backward_ms", backward_ms}, {"steps", steps}, {"warmup", warmup},
                      {"timer_slack_ns", slack_ns}, {"load_before", load_before}, {"load_after", load_after},
                      {"target_met", all_ok}};
  for (const auto& r : results)
    j["cases"].push_back({{"schedule", r.schedule},
                          {"microbatches", r.microbatches},
                          {"chunks", r.chunks},
                          {"step_ms", r.step_ms},
                          {"step_min_ms", r.step_min_ms},
                          {"span_ms", r.span_ms},
                          {"simulated_ms", r.sim_ms},
                          {"ratio", r.ratio()},
                          {"calibrated_ms", r.calibrated_ms},
                          {"ratio_calibrated", r.step_ms / r.calibrated_ms},
                          {"ideal_ms", r.ideal_ms},
                          {"bubble", r.bubble()},
                          {"bubble_formula", r.bubble_formula},
                          {"bubble_simulated", r.bubble_sim},
                          {"edges_us", r.edges_us},
                          {"sleep_excess_us", r.sleep_excess_us},
                          {"hop_us", r.hop_us},
                          {"loss_us", r.loss_us},
                          {"dispatch_us", r.dispatch_us},
                          {"dispatch_p90_us", r.dispatch_p90_us},
                          {"critical_path", {{"tasks", r.path.tasks}, {"nominal_ms", r.path.nominal / 1e3},
                                             {"overshoot_ms", r.path.excess / 1e3}, {"hops_ms", r.path.hop / 1e3},
                                             {"loss_ms", r.path.loss / 1e3}, {"dispatch_ms", r.path.dispatch / 1e3}}},
                          {"peak_stash", r.peak_stash},
                          {"simulated_peak_stash", r.sim_peak_stash}});
  std::printf("%s\n", j.dump().c_str());
  return 0;
  return 0;
}

}  // namespace overhead

// ---- mailbox: per-task cost of holding scrambled tasks in a retriever's task_queue or its mailbox (caf::skip)
// Note [mailbox as the queue] holds the decision. N small tasks arrive at a retriever in some order, then
// begin_atom; it hands them to a processor stand-in in schedule order, at most two in flight. "queue" keeps
// arrivals in stage/task_queue (the current design); "skip" leaves them in the mailbox with caf::skip, which CAF
// re-offers after every consumed message. Arrival orders: scrambled, reverse (skip's worst) and in order.
namespace mailbox {

using namespace ap;
using steady = std::chrono::steady_clock;

constexpr std::uint64_t bench_step = 1;
constexpr int max_in_flight = 2;

// The schedule: F0 B0 F1 B1 ... (chunk 0).
std::vector<action> schedule_of(int n) {
  std::vector<action> actions;
  for (int mb = 0; mb < n / 2; ++mb) {
    actions.push_back(action{0, op::forward, mb, 0});
    actions.push_back(action{0, op::backward, mb, 0});
  }
  return actions;
}

// ---- the processor stand-in: checks the order, answers task_done, stamps the last task

struct finish_line {
  std::promise<steady::time_point> done;
  bool in_order = true;
  std::size_t waiting_seen = 0;
  std::size_t offers = 0;  // skip: task handler runs (one per task at least)
};

struct consumer_state {
  std::vector<action> expected;
  std::size_t next = 0;
  std::shared_ptr<finish_line> finish;
  static inline const char* name = "consumer";
};

void take(caf::stateful_actor<consumer_state>* self, op kind, int microbatch, int chunk) {
  auto& st = self->state;
  const action& a = st.expected.at(st.next);
  if (a.kind != kind || a.microbatch != microbatch || a.chunk != chunk) st.finish->in_order = false;
  self->send(caf::actor_cast<caf::actor>(self->current_sender()), task_done{bench_step, 0, {}});
  if (++st.next == st.expected.size()) st.finish->done.set_value(steady::now());
}

caf::behavior consumer(caf::stateful_actor<consumer_state>* self, std::vector<action> expected,
                       std::shared_ptr<finish_line> finish) {
  self->state.expected = std::move(expected);
  self->state.finish = std::move(finish);
  return {
      [=](run_forward& r) { take(self, op::forward, r.task.microbatch, r.task.chunk); },
      [=](run_backward& r) { take(self, r.kind, r.task.microbatch, r.task.chunk); },
  };
}

// ---- (a) the current design: every arrival into a task_queue

struct queue_state {
  std::vector<action> actions;
  caf::actor processor;
  task_queue queue;
  bool running = false;
  std::size_t cursor = 0;
  int in_flight = 0;
  static inline const char* name = "queue_retriever";
};
using queue_actor = caf::stateful_actor<queue_state>;

void dispatch(queue_actor* self) {
  auto& st = self->state;
  while (st.running && st.in_flight < max_in_flight && st.cursor < st.actions.size()) {
    const action& a = st.actions[st.cursor];
    if (!st.queue.ready(a, bench_step)) return;
    ++st.cursor;
    ++st.in_flight;
    pending_task task = st.queue.take(a, bench_step);
    if (auto* t = std::get_if<forward_task>(&task)) self->send(st.processor, run_forward{std::move(*t)});
    else self->send(st.processor, run_backward{a.kind, std::get<backward_task>(std::move(task))});
  }
}

caf::behavior queue_retriever(queue_actor* self, std::vector<action> actions, caf::actor processor) {
  self->state.actions = std::move(actions);
  self->state.processor = std::move(processor);
  return {
      [=](forward_task& t) {
        self->state.queue.put(std::move(t));
        dispatch(self);
      },
      [=](backward_task& t) {
        self->state.queue.put(std::move(t));
        dispatch(self);
      },
      [=](begin_atom, std::uint64_t) {
        self->state.running = true;
        dispatch(self);
      },
      [=](task_done&) {
        --self->state.in_flight;
        dispatch(self);
      },
  };
}

// ---- (b) the mailbox as the queue: caf::skip

struct skip_state {
  std::vector<action> actions;
  caf::actor processor;
  std::shared_ptr<finish_line> finish;
  bool running = false;
  std::size_t cursor = 0;
  int in_flight = 0;
  static inline const char* name = "skip_retriever";
};
using skip_actor = caf::stateful_actor<skip_state>;

template <class Task>
bool wanted(const skip_state& st, const Task& t, bool forward) {
  ++st.finish->offers;
  if (!st.running || st.in_flight >= max_in_flight || st.cursor >= st.actions.size()) return false;
  const action& a = st.actions[st.cursor];
  return (a.kind == op::forward) == forward && t.step == bench_step && t.microbatch == a.microbatch &&
         t.chunk == a.chunk;
}

caf::behavior skip_retriever(skip_actor* self, std::vector<action> actions, caf::actor processor,
                             std::shared_ptr<finish_line> finish) {
  self->state.actions = std::move(actions);
  self->state.processor = std::move(processor);
  self->state.finish = std::move(finish);
  return {
      [=](forward_task& t) -> caf::result<void> {
        auto& st = self->state;
        if (!wanted(st, t, true)) return caf::skip;
        ++st.cursor, ++st.in_flight;
        self->send(st.processor, run_forward{std::move(t)});
        return caf::unit;
      },
      [=](backward_task& t) -> caf::result<void> {
        auto& st = self->state;
        if (!wanted(st, t, false)) return caf::skip;
        const op kind = st.actions[st.cursor].kind;
        ++st.cursor, ++st.in_flight;
        self->send(st.processor, run_backward{kind, std::move(t)});
        return caf::unit;
      },
      [=](begin_atom, std::uint64_t) {
        // The skipped tasks sit in the normal queue's cache (scheduled_actor::get_normal_queue(), public but
        // undocumented).
        std::size_t waiting = 0;
        for (auto& x : self->get_normal_queue().cache())
          if (x.content().match_elements<forward_task>() || x.content().match_elements<backward_task>()) ++waiting;
        self->state.finish->waiting_seen = waiting;
        self->state.running = true;
      },
      [=](task_done&) { --self->state.in_flight; },
  };
}

// ---- one round

enum class design { queue, skip };
enum class arrival { scrambled, reverse, in_order };
const char* name_of(arrival a) {
  return a == arrival::scrambled ? "scrambled" : a == arrival::reverse ? "reverse" : "in order";
}

std::vector<std::size_t> arrival_order(std::size_t n, arrival a, unsigned seed) {
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  if (a == arrival::reverse) std::reverse(order.begin(), order.end());
  if (a == arrival::scrambled) std::shuffle(order.begin(), order.end(), std::mt19937(seed));
  return order;
}

struct round_result {
  double ns_per_task = 0.0;
  std::size_t waiting_seen = 0;
  double offers_per_task = 0.0;
};

round_result run_round(caf::actor_system& sys, design d, const std::vector<action>& actions,
                       const std::vector<std::size_t>& order) {
  auto finish = std::make_shared<finish_line>();
  auto done = finish->done.get_future();
  auto processor = sys.spawn(consumer, actions, finish);
  caf::actor retriever = d == design::queue ? sys.spawn(queue_retriever, actions, processor)
                                            : sys.spawn(skip_retriever, actions, processor, finish);
  // The tasks are built outside the timed part.
  auto tasks = std::make_shared<std::vector<pending_task>>();
  for (std::size_t i : order) {
    const action& a = actions[i];
    tensor data = tensor::from_shape({1, 1});
    if (a.kind == op::forward) tasks->push_back(forward_task{bench_step, a.microbatch, a.chunk, 0, 0, std::move(data)});
    else tasks->push_back(backward_task{bench_step, a.microbatch, a.chunk, 0, 0, std::move(data)});
  }
  auto start = std::make_shared<steady::time_point>();
  std::promise<void> started;
  auto sent = started.get_future();
  sys.spawn([=, &started](caf::event_based_actor* self) {
    *start = steady::now();
    for (auto& t : *tasks) std::visit([&](auto& task) { self->send(retriever, std::move(task)); }, t);
    self->send(retriever, begin_atom::value, bench_step);
    started.set_value();
  });
  sent.wait();
  const steady::time_point end = done.get();
  caf::anon_send_exit(retriever, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(processor, caf::exit_reason::user_shutdown);
  if (!finish->in_order) {
    throw std::runtime_error(std::string(d == design::queue ? "queue" : "skip") + " handed tasks out of schedule order");
  }
  const auto n = static_cast<double>(actions.size());
  return {std::chrono::duration<double, std::nano>(end - *start).count() / n, finish->waiting_seen,
          static_cast<double>(finish->offers) / n};
}

int run(ap::bench::arguments& args) {
  const int rounds = static_cast<int>(args.integer("--rounds", 101, 1)), warmup = static_cast<int>(args.integer("--warmup", 5));
  args.done();
  caf::actor_system_config cfg;
  configure_scheduler(cfg);
  caf::actor_system sys{cfg};
  nlohmann::json points = nlohmann::json::array();
  std::printf("bench_schedules mailbox: %d rounds (+%d warm-up) per point, load average %s\n", rounds, warmup,
              load_average().c_str());
  std::printf("%-10s %5s %14s %14s %11s %13s %12s\n", "arrival", "N", "queue ns/task", "skip ns/task", "skip/queue",
              "offers/task", "skip listed");
  for (arrival a : {arrival::scrambled, arrival::reverse, arrival::in_order}) {
    for (int n : {8, 32, 128, 512}) {
      const std::vector<action> actions = schedule_of(n);
      std::vector<double> queue_ns, skip_ns, offers;
      std::size_t listed = 0;
      for (int r = 0; r < warmup + rounds; ++r) {
        const auto order = arrival_order(actions.size(), a, static_cast<unsigned>(1000 * n + r));
        const round_result q = run_round(sys, design::queue, actions, order);
        const round_result s = run_round(sys, design::skip, actions, order);
        if (r < warmup) continue;
        queue_ns.push_back(q.ns_per_task);
        skip_ns.push_back(s.ns_per_task);
        offers.push_back(s.offers_per_task);
        listed = s.waiting_seen;
      }
      const double mq = median(queue_ns), ms = median(skip_ns);
      std::printf("%-10s %5d %14.0f %14.0f %11.2f %13.1f %7zu of %-3d\n", name_of(a), n, mq, ms, ms / mq,
                  median(offers), listed, n);
      std::fflush(stdout);
      points.push_back({{"arrival", name_of(a)}, {"tasks", n}, {"queue_ns_per_task", mq}, {"skip_ns_per_task", ms},
                        {"skip_offers_per_task", median(offers)}, {"skip_listed", listed}});
    }
  }
  std::printf("load average after: %s\n%s\n", load_average().c_str(),
              nlohmann::json{{"bench", "bench_schedules mailbox"}, {"rounds", rounds}, {"points", points}}.dump().c_str());
  return 0;
}

}  // namespace mailbox

}  // namespace

int main(int argc, char** argv) {
  return ap::bench::run_mode(
      argc, argv, "bench_schedules",
      {{"train", "[--steps N] [--warmup N] [--block N] [--partition uniform|params|time] [--microbatches M] [--data DIR] "
                 "[--no-single]",
        "2-stage training with every schedule: throughput, busy time, stashes, against the simulator", training::run},
       {"overhead", "[--steps N] [--warmup N] [--forward-ms F] [--backward-ms B] [--default-slack]",
        "the runtime's overhead on 4 sleeping stages: measured / simulated makespan, where the time goes", overhead::run},
       {"mailbox", "[--rounds R] [--warmup W]", "early tasks in the stage's task queue against CAF's mailbox (skip)",
        mailbox::run}});
}

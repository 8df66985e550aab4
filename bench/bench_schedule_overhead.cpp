// bench_schedule_overhead: the actor runtime's own overhead, measured makespan / simulated makespan, on
// stages that sleep instead of computing.
//
// Every stage is sleep layers (model/sleep_layer.hpp): F ms forward and B ms backward per stage (I = W = B/2
// for zero bubble), taking wall time without CPU, so 2 cores do not limit 4 stages. For p = 4, m = 8 and 16
// and every schedule (interleaved with v = 2: 8 chunks of F/2, B/2), a few train steps after a warm-up:
//   step      median wall time of pipeline::train_step (what a user waits for)
//   span      median time from the step's first task start to its last task finish (event log)
//   sim       ap::simulate with the nominal costs (F, I = W = B/2): the schedule's own makespan
//   ratio     step / sim, the runtime overhead (target <= 1.05)
//   bubble    step / ideal - 1 next to the schedule's bubble formula (F = I = W here, as the formula assumes)
// and where the difference goes (Note [where the time goes]).
//
// Note [the first layer's input gradient]: the pipeline never computes the gradient of the model input, so
// chunk 0's first layer skips backward_input (sequential::backward with need_input_grad false). A sleep
// layer first would then make stage 0's backward B/2 short. A zero-time sleep:0:0 layer goes first in
// chunk 0, so every stage sleeps exactly F and B.
//
// Note [timer slack]: Linux lengthens every sleep by the thread's timer slack (50 us by default) so wake-ups
// can be batched. On 1 ms sleeps that is 5% of each task, which would be charged to the runtime. The
// benchmark sets the slack to 1 ns before the pipeline starts its threads (they inherit it), unless
// --default-slack; the calibrated column (sim with the measured task durations) removes the rest of the
// sleeps' inaccuracy either way.
//
// Usage: bench_schedule_overhead [--steps N] [--warmup N] [--forward-ms F] [--backward-ms B] [--default-slack]
// Prints a table, then one final JSON line.

#include <sys/prctl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/bench_support.hpp"
#include "actors/pipeline.hpp"
#include "data/synthetic.hpp"
#include "schedule/schedule.hpp"

namespace {

using ap::bench::load_average;
using ap::bench::median;


double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<std::size_t>(q * double(v.size())))];
}


std::string ms_text(double ms) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", ms);
  return buf;
}

// Note [the first layer's input gradient]: sleep:0:0 first, then one sleep layer per chunk.
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

// Note [where the time goes]
// From the event log of each timed step, every task as it ran (start, finish, its message's arrival at the
// retriever), and these latencies (microseconds):
//   hop       the producing task's finish -> the result's arrival at the next stage's retriever
//             (processor -> sender -> retriever: two mailboxes served by CAF's scheduler threads)
//   loss      the last chunk's forward finish -> its gradient's arrival back, through the coordinator
//   dispatch  a task's start - max(its message's arrival, the stage's previous finish): the retriever
//             handing the processor its next action (task_done -> retriever -> processor thread wake-up)
//   edges     step wall time - span: the coordinator's split and begin before the first task, and after the
//             last one stage_done, every stage's optimizer apply and the reply
// The critical path is walked back from the last task to finish: at each task, whichever of its message's
// arrival and its stage's previous finish came last is what it waited for. Along that path the span splits
// exactly into nominal compute (the sleeps as asked) + sleep excess (the sleeps' overshoot) + hops + loss
// hops + dispatches.
struct ran_task {
  int stage = 0;
  ap::op kind = ap::op::forward;
  int microbatch = 0, chunk = 0;
  double start = 0, finish = 0;
  double arrival = -1;    // its message's arrival (F, B, I); -1 for W, which needs none
  int previous = -1;      // the stage's previous task
  int producer = -1;      // the task whose result it consumes; -1: the coordinator's input
  bool via_loss = false;  // the producer is the last chunk's forward, through the coordinator's loss
};

std::vector<ran_task> tasks_of(const std::vector<ap::stage_event>& events, int total_chunks) {
  using key = std::tuple<int, int, int>;  // class (0 forward, 1 backward), microbatch, chunk
  std::vector<ran_task> tasks;
  std::map<int, int> open, last_on_stage;
  std::map<key, double> arrived;
  std::map<key, int> produced;  // F -> (0, mb, chunk); B or I -> (1, mb, chunk)
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
  std::vector<double> hop, loss, dispatch;  // every task's, microseconds
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
    if (t.producer >= 0 && t.arrival > stage_free) {  // waited for its message
      const double hop = t.arrival - tasks[static_cast<std::size_t>(t.producer)].finish;
      (t.via_loss ? path.loss : path.hop) += hop;
      path.dispatch += t.start - t.arrival;
      at = t.producer;
    } else if (t.previous >= 0) {  // waited for its stage
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
  double edges_us = 0;         // median over steps of wall - span
  double sleep_excess_us = 0;  // median measured task duration - nominal, over all tasks
  critical_path path;          // medians over steps, each field on its own
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
  const ap::dataset d = ap::make_blobs(static_cast<std::size_t>(2 * m), 4, 4, 1);  // 2 rows per microbatch

  case_result r;
  r.schedule = schedule, r.stages = p, r.microbatches = m, r.chunks = v;
  ap::op_costs nominal;
  nominal.forward.assign(p, forward_ms);
  nominal.backward_input.assign(p, backward_ms / 2);
  nominal.backward_weight.assign(p, backward_ms / 2);
  const ap::simulation sim = ap::simulate(pipe.schedule(), nominal);
  r.sim_ms = sim.makespan, r.ideal_ms = sim.ideal, r.bubble_sim = sim.bubble, r.sim_peak_stash = sim.peak_stash;
  r.bubble_formula = formula_bubble(schedule, p, m, v);

  // A task's nominal duration: a chunk is 1/v of its stage.
  auto nominal_us = [&](const ran_task& t) {
    const double stage_ms = t.kind == ap::op::forward ? forward_ms : t.kind == ap::op::backward ? backward_ms : backward_ms / 2;
    return stage_ms / v * 1e3;
  };
  std::vector<double> walls, spans, edges, excess;
  std::map<std::pair<int, ap::op>, std::vector<double>> durations;  // (stage, op) -> ms
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

  // Calibrated: the same schedule simulated with each stage's median measured duration per op (the sleeps'
  // overshoot included), so step / calibrated is the runtime's share alone.
  ap::op_costs measured = nominal;
  for (int stage = 0; stage < p; ++stage) {
    auto med = [&](ap::op k) { return median(durations[{stage, k}]); };  // ms of one chunk's task
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

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr,
               "%s\nusage: bench_schedule_overhead [--steps N] [--warmup N] [--forward-ms F] [--backward-ms B]"
               " [--default-slack]\n",
               why.c_str());
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 5, warmup = 2;
  double forward_ms = 2.0, backward_ms = 4.0;
  bool default_slack = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "--steps" && has_value) steps = std::atoi(argv[++i]);
    else if (a == "--warmup" && has_value) warmup = std::atoi(argv[++i]);
    else if (a == "--forward-ms" && has_value) forward_ms = std::atof(argv[++i]);
    else if (a == "--backward-ms" && has_value) backward_ms = std::atof(argv[++i]);
    else if (a == "--default-slack") default_slack = true;
    else usage("unknown or incomplete option '" + a + "'");
  }
  if (steps < 1 || warmup < 0 || !(forward_ms > 0) || !(backward_ms > 0))
    usage("--steps must be positive, --warmup non-negative, the sleep times positive");
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
      // A sleeping layer sleeps once per call whatever its rows, so sync-backward's one whole-batch backward
      // would sleep B instead of m*B: nothing here to compare with the simulator (it runs in bench_schedules).
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

  nlohmann::json j = {{"bench", "schedule_overhead"}, {"stages", p}, {"forward_ms", forward_ms},
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
}

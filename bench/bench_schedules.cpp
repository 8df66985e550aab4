// bench_schedules: real training on a 2-stage pipeline, every schedule: throughput and stashed activations.
//
// Fashion-MNIST, model 784-2048-2048-2048-10 (7 layers, 10M parameters), batch 256, Adam, one compute
// thread per stage, m = 8 microbatches of 32 rows; gpipe, 1f1b, interleaved (v = 2: 4 chunks, stage 0
// holding chunks 0 and 2) and zb-h1. After a few warm-up steps, a fixed number of timed steps (the same
// batches for every schedule) give:
//   samples/s      timed samples / timed wall time, and batch / median step time (resists a loaded machine)
//   peak stash     the most microbatch activations each stage held at once (runtime count; = simulator)
//   busy           each stage's median compute time per step (event log), and the simulated step time from
//                  layer costs measured alone on one microbatch (partition.hpp): sim ms
// The single-process step (one thread, no actors) on the same batches is the reference.
//
// Every runner is built first and the timed steps alternate between them in blocks (Note [alternating
// blocks]), so foreign load on the shared machine spreads over all schedules.
//
// Usage: bench_schedules [--steps N] [--warmup N] [--block N] [--partition uniform|params|time]
//                        [--microbatches M] [--data DIR] [--no-single]
// Prints a table, then one final JSON line.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/bench_support.hpp"
#include "plan/partition.hpp"
#include "actors/pipeline.hpp"
#include "data/dataset.hpp"
#include "data/fashion_mnist.hpp"
#include "tensor/compute.hpp"
#include "training/trainer.hpp"

namespace {

using ap::bench::load_average;
using ap::bench::median;

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

// One way to train a step (single process, or a pipeline with one schedule) and what its steps measured.
struct runner {
  run_result result;
  std::function<float(const ap::batch&, int)> step;  // one train step on a batch, step number
  std::function<void(run_result&)> finish;           // fills the rest of the result after the last step
  std::vector<double> times_ms;
  double loss_sum = 0.0;
  int steps_taken = 0;
};

// Note [alternating blocks]: the machine is shared (2 vCPUs). Every runner takes its warm-up steps, then the
// timed steps run in blocks of `block` steps per runner in turn, so a burst of foreign load hits all
// schedules alike instead of one; every runner sees the same batches in the same order.
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

// A pipeline runner; the pipeline lives as long as the runner's functions (shared).
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

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr,
               "%s\nusage: bench_schedules [--steps N] [--warmup N] [--block N] [--partition uniform|params|time]"
               " [--microbatches M] [--data DIR] [--no-single]\n",
               why.c_str());
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 30, warmup = 3, microbatches = 8, block = 5;
  std::string dir = ap::default_fashion_mnist_dir, partition = "uniform";
  bool single = true;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "--steps" && has_value) steps = std::atoi(argv[++i]);
    else if (a == "--warmup" && has_value) warmup = std::atoi(argv[++i]);
    else if (a == "--microbatches" && has_value) microbatches = std::atoi(argv[++i]);
    else if (a == "--block" && has_value) block = std::atoi(argv[++i]);
    else if (a == "--partition" && has_value) partition = argv[++i];
    else if (a == "--data" && has_value) dir = argv[++i];
    else if (a == "--no-single") single = false;
    else usage("unknown or incomplete option '" + a + "'");
  }
  if (steps < 1 || warmup < 0 || microbatches < 1 || block < 1)
    usage("--steps, --microbatches and --block must be positive, --warmup not negative");
  ap::partition_method method;
  try {
    method = ap::parse_partition_method(partition);
  } catch (const std::exception& e) {
    usage(e.what());
  }

  ap::set_compute_threads(1);
  ap::dataset data;
  try {
    data = ap::load_fashion_mnist("train", dir);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cannot load Fashion-MNIST: %s\n", e.what());
    return 1;
  }
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
  std::printf("\nload average after: %s (2 vCPUs: above ~2 means another process competed for the cores)\n",
              load_after.c_str());

  nlohmann::json j = {{"bench", "schedules"}, {"model", model_spec},      {"batch_size", batch_size},
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
}

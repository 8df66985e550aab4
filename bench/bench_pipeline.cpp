// Pipeline speed-up on this machine: Fashion-MNIST, 784-2048-2048-2048-10, batch 256: one stage against two
// stages (8 microbatches), with each stage's busy time. Prints a table and one JSON line.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "actors/pipeline.hpp"
#include "data/fashion_mnist.hpp"
#include "tensor/compute.hpp"

using namespace ap;

namespace {

struct measured {
  std::string name;
  double samples_per_s = 0.0;
  std::vector<double> busy_share;  // per stage: busy time / wall time
};

// Median samples/s over `steps` steps after `warmup`, on consecutive batches of one epoch order.
template <class Step>
double samples_per_second(const dataset& d, std::size_t batch_size, int warmup, int steps, Step step) {
  const auto order = epoch_order(d.size(), 1, 0);
  std::vector<double> rates;
  for (int s = 0; s < warmup + steps; ++s) {
    const batch b = make_batch(d, order, static_cast<std::size_t>(s) % batch_count(d.size(), batch_size), batch_size);
    const auto t0 = std::chrono::steady_clock::now();
    step(b, s);
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (s >= warmup) rates.push_back(static_cast<double>(rows(b.inputs)) / dt);
  }
  std::nth_element(rates.begin(), rates.begin() + rates.size() / 2, rates.end());
  return rates[rates.size() / 2];
}

measured run_pipeline(const dataset& d, const sequential& model, int stages, int microbatches, const std::string& sched,
                      int warmup, int steps) {
  pipeline_options o;
  o.stages = stages;
  o.microbatches = microbatches;
  o.schedule = sched;
  o.record_events = true;
  pipeline pipe(model, o);
  measured m;
  m.name = std::to_string(stages) + " stage" + (stages > 1 ? "s" : "") + ", m=" + std::to_string(microbatches) + ", " + sched;
  const auto t0 = std::chrono::steady_clock::now();
  bool cleared = false;
  m.samples_per_s = samples_per_second(d, 256, warmup, steps, [&](const batch& b, int s) {
    if (s == warmup && !cleared) pipe.clear_events(), cleared = true;
    pipe.train_step(b.inputs, b.labels, static_cast<std::uint64_t>(s));
  });
  (void)t0;
  const auto events = pipe.events();
  const double wall_us = events.empty() ? 1.0 : events.back().time_us - events.front().time_us;
  for (double b : busy_time_us(events, stages)) m.busy_share.push_back(b / wall_us);
  return m;
}

}  // namespace

int main(int argc, char** argv) {
  ap::keep_tensor_memory();
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  const int warmup = 3, steps = quick ? 8 : 30;
  set_compute_threads(1);
  const dataset train_set = load_fashion_mnist("train");
  const sequential model = sequential::from_spec("784-2048-2048-2048-10");

  std::vector<measured> results;
  {
    sequential local = model.clone();
    local_runner runner(local, optimizer_config{});
    measured m;
    m.name = "single process (no actors)";
    m.samples_per_s = samples_per_second(train_set, 256, warmup, steps, [&](const batch& b, int s) {
      runner.train_step(b.inputs, b.labels, static_cast<std::uint64_t>(s));
    });
    results.push_back(m);
  }
  results.push_back(run_pipeline(train_set, model, 1, 1, "gpipe", warmup, steps));
  for (const char* sched : {"gpipe", "1f1b"}) results.push_back(run_pipeline(train_set, model, 2, 8, sched, warmup, steps));
  results.push_back(run_pipeline(train_set, model, 2, 16, "1f1b", warmup, steps));

  const double base = results[1].samples_per_s;
  nlohmann::json out = nlohmann::json::array();
  std::printf("%-34s %12s %10s  %s\n", "configuration", "samples/s", "vs 1 stage", "busy share per stage");
  for (const auto& r : results) {
    std::string busy;
    for (double b : r.busy_share) busy += std::to_string(static_cast<int>(b * 100 + 0.5)) + "% ";
    std::printf("%-34s %12.0f %9.2fx  %s\n", r.name.c_str(), r.samples_per_s, r.samples_per_s / base, busy.c_str());
    out.push_back({{"name", r.name}, {"samples_per_s", r.samples_per_s}, {"ratio_vs_1_stage", r.samples_per_s / base},
                   {"busy_share", r.busy_share}});
  }
  std::printf("%s\n", nlohmann::json{{"bench", "pipeline"}, {"results", out}}.dump().c_str());
}

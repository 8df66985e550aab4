// bench_parallelism: the ways to use this machine's cores on one model, side by side in one run, so a user
// can pick: one process on 1 and on 2 compute threads, data parallelism (D = 2 replicas), tensor
// parallelism (T = 2: the Megatron MLP split, and a GPT's attention heads and block MLPs), a 2-stage pipeline
// (1F1B and ZB-H1, 8 microbatches), and tensor and data parallelism through the actor runtime (a stage of
// T = 2 ranks, D = 2 pipeline replicas) to show what the actors cost over the plain threads.
//
// Models: the heavy MLP 784-2048-2048-2048-10 (batch 256, Adam) and gpt:layers=4,dim=256,heads=8,context=128
// (batch 16 sequences, AdamW). Each configuration runs --steps timed steps (after 2 warm-up steps) in each of
// --rounds rounds; configurations alternate within a round, so a burst of load hits all of them alike. The
// median round is printed (samples/s, and tokens/s for the GPT), with its ratio to one process on 2 threads.
//
// Usage: bench_parallelism [--steps N] [--rounds R] [--only mlp|gpt]
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "actors/data_parallel_pipeline.hpp"
#include "bench_support.hpp"
#include "tensor/compute.hpp"
#include "training/data_tensor_runner.hpp"
#include "training/trainer.hpp"

namespace {

using namespace ap;

struct workload {
  std::string name, spec;
  tensor inputs, labels;
  std::size_t tokens_per_sample = 1;
  optimizer_config optimizer;
};

workload heavy_mlp() {
  workload w{"heavy MLP", "784-2048-2048-2048-10", tensor::from_shape({256, 784}), tensor::from_shape({256}), 1, {}};
  for (std::size_t i = 0; i < w.inputs.size(); ++i) w.inputs.data()[i] = static_cast<float>((i * 2654435761u) % 1000) / 1000.0f;
  for (std::size_t i = 0; i < w.labels.size(); ++i) w.labels.data()[i] = static_cast<float>(i % 10);
  w.optimizer.kind = "adam";
  return w;
}

workload gpt() {
  workload w{"GPT", "gpt:layers=4,dim=256,heads=8,context=128", tensor::from_shape({16, 128}),
             tensor::from_shape({16, 128}), 128, {}};
  for (std::size_t i = 0; i < w.inputs.size(); ++i) {
    w.inputs.data()[i] = static_cast<float>((i * 37 + 11) % 256);
    w.labels.data()[i] = static_cast<float>((i * 53 + 7) % 256);
  }
  w.optimizer.kind = "adamw";
  w.optimizer.weight_decay = 0.1f;
  return w;
}

struct configuration {
  configuration(std::string name, std::function<std::unique_ptr<step_runner>(sequential&, const workload&)> make,
                int compute_threads = 1)
      : name(std::move(name)), make(std::move(make)), compute_threads(compute_threads) {}
  std::string name;
  std::function<std::unique_ptr<step_runner>(sequential&, const workload&)> make;
  int compute_threads = 1;  // of the calling thread (the single process's OpenMP threads)
  std::unique_ptr<sequential> model;
  std::unique_ptr<step_runner> runner;
  std::vector<double> rates;  // samples/s per round
  std::uint64_t step = 0;
};

}  // namespace

int main(int argc, char** argv) try {
  keep_tensor_memory();
  int steps = 5, rounds = 3;
  std::string only;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--steps" && i + 1 < argc) steps = std::stoi(argv[++i]);
    else if (a == "--rounds" && i + 1 < argc) rounds = std::stoi(argv[++i]);
    else if (a == "--only" && i + 1 < argc) only = argv[++i];
    else throw std::invalid_argument("unknown flag " + a + " (usage: bench_parallelism [--steps N] [--rounds R] [--only mlp|gpt])");
  }
  nlohmann::json results = nlohmann::json::array();
  std::vector<workload> workloads;
  if (only.empty() || only == "mlp") workloads.push_back(heavy_mlp());
  if (only.empty() || only == "gpt") workloads.push_back(gpt());
  for (const workload& w : workloads) {
    std::vector<configuration> configs;
    const auto local = [](sequential& m, const workload& w) { return std::make_unique<local_runner>(m, w.optimizer); };
    configs.push_back({"1 process, 1 thread", local, 1});
    configs.push_back({"1 process, 2 threads", local, 2});
    configs.push_back({"data parallel D=2", [](sequential& m, const workload& w) {
                         return std::make_unique<data_tensor_runner>(m, w.optimizer, "cross_entropy", data_tensor_options{2, 1});
                       }});
    configs.push_back({"tensor parallel T=2", [](sequential& m, const workload& w) {
                         return std::make_unique<data_tensor_runner>(m, w.optimizer, "cross_entropy", data_tensor_options{1, 2});
                       }});
    const auto pipelined = [](int D, int P, int T, const char* schedule, int microbatches) {
      return [=](sequential& m, const workload& w) -> std::unique_ptr<step_runner> {
        pipeline_options o;
        o.stages = P;
        o.microbatches = microbatches;
        o.schedule = schedule;
        o.optimizer = w.optimizer;
        o.tensor_parallel = T;
        return std::make_unique<data_parallel_pipeline>(m, o, D);
      };
    };
    configs.push_back({"pipeline P=2 (1F1B, 8 mb)", pipelined(1, 2, 1, "1f1b", 8)});
    configs.push_back({"pipeline P=2 (ZB-H1, 8 mb)", pipelined(1, 2, 1, "zb-h1", 8)});
    // The same parallelism through the actor runtime (Note [tensor-parallel stage], [data-parallel pipeline]):
    // one stage of T = 2 lockstep ranks, and D = 2 replicas of a one-stage pipeline.
    configs.push_back({"actors: 1 stage x T=2", pipelined(1, 1, 2, "gpipe", 1)});
    configs.push_back({"actors: D=2 x 1 stage", pipelined(2, 1, 1, "gpipe", 1)});
    for (auto& c : configs) {
      set_compute_threads(1);
      c.model = std::make_unique<sequential>(sequential::from_spec(w.spec));
      c.runner = c.make(*c.model, w);
    }
    const double samples = static_cast<double>(w.inputs.shape()[0]);
    for (int r = 0; r < rounds; ++r)
      for (auto& c : configs) {
        set_compute_threads(c.compute_threads);
        for (int s = 0; s < (r == 0 ? 2 : 0); ++s) c.runner->train_step(w.inputs, w.labels, c.step++);
        const auto t0 = std::chrono::steady_clock::now();
        for (int s = 0; s < steps; ++s) c.runner->train_step(w.inputs, w.labels, c.step++);
        const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        c.rates.push_back(samples * steps / dt);
      }
    std::printf("%s %s, batch %zu, %d rounds of %d steps, load %s\n", w.name.c_str(), w.spec.c_str(),
                w.inputs.shape()[0], rounds, steps, bench::load_average().c_str());
    std::printf("  %-28s %12s %12s %10s %10s\n", "configuration", "samples/s", "tokens/s", "vs 1 thr", "vs 2 thr");
    const double one = bench::median(configs[0].rates), base = bench::median(configs[1].rates);
    for (auto& c : configs) {
      const double rate = bench::median(c.rates);
      std::printf("  %-28s %12.1f %12.0f %9.2fx %9.2fx\n", c.name.c_str(), rate, rate * w.tokens_per_sample, rate / one,
                  rate / base);
      results.push_back({{"model", w.spec}, {"configuration", c.name}, {"samples_per_s", rate},
                         {"tokens_per_s", rate * w.tokens_per_sample}, {"vs_one_process_one_thread", rate / one},
                         {"vs_one_process_two_threads", rate / base}});
    }
  }
  std::cout << nlohmann::json{{"bench", "parallelism"}, {"results", results}}.dump() << std::endl;
  return 0;
} catch (const std::exception& e) {
  std::cerr << "bench_parallelism: " << e.what() << "\n";
  return 1;
}

// bench_scaling: how each way of running uses this machine's cores, in one run (Note [cores per rank]).
// Sweeps, on the cores this process may use (n): one process at 1, 2, 4, ... n intra-op threads; data parallelism
// (D replicas), tensor parallelism (T ranks) and the pipeline (P stages) alone; and P x threads, P x D, P x T
// filling the cores, and P stages sharing every core by stage cost (Note [cores by stage cost]). Models: the heavy
// MLP 784-2048-2048-2048-10 (batch 1024), the 4-layer GPT gpt:layers=4,dim=256,heads=8,context=128 and a 16-layer
// one (batch 64 sequences); Adam. Each configuration is built anew every round (Note [idle teams] in
// tensor/compute.hpp) and runs --steps timed steps after 2 warm-up steps (1 after the first round), --rounds
// times (configurations alternate within a round); the median is printed in samples (or tokens) per second with
// its efficiency: rate / (one thread's rate x the cores it uses). Pipelines run 8 microbatches on --schedule
// (default zb-h1; PyTorch's pipelines run 1F1B), split in whole blocks balanced by parameters (Note [default
// partition] in plan/partition.hpp). Where `python3 -c "import torch"` works, the same models and splits of the
// cores run on PyTorch (bench/torch_cpu_bench.py: one process, torch.distributed.pipelining over gloo, DDP; a
// split by stage cost against its even split) and the ratio is printed. A table per model, then one JSON line.
//
// Usage: bench_scaling [--models mlp,gpt4,gpt16] [--steps N] [--rounds R] [--dtype float32|bfloat16]
//                      [--schedule gpipe|1f1b|zb-h1] [--torch PATH_TO_torch_cpu_bench.py | --no-torch]
//                      [--max-cores N] [--only TEXT;...]
// --only keeps the configurations whose name contains one of the texts, separated by ';' since the names hold
// commas (e.g. "P=4, 4 threads;D=16"), beside the one-thread process every efficiency is measured against.
#include <chrono>
#include <cstdio>
#include <functional>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "actors/data_parallel_pipeline.hpp"
#include "bench_support.hpp"
#include "plan/cores.hpp"
#include "plan/partition.hpp"
#include "tensor/compute.hpp"
#include "training/data_tensor_runner.hpp"
#include "training/trainer.hpp"

namespace {

using namespace ap;

struct workload {
  std::string key, spec, torch_spec;
  tensor inputs, labels;
  std::size_t tokens_per_sample = 1;
  std::size_t heads = 0;  // T must divide them (0: an MLP, T divides 2048)
};

workload mlp() {
  workload w{"mlp", "784-2048-2048-2048-10", "mlp:784-2048-2048-2048-10", tensor::from_shape({1024, 784}),
             tensor::from_shape({1024}), 1, 0};
  for (std::size_t i = 0; i < w.inputs.size(); ++i) w.inputs.data()[i] = static_cast<float>((i * 2654435761u) % 1000) / 1000.0f;
  for (std::size_t i = 0; i < w.labels.size(); ++i) w.labels.data()[i] = static_cast<float>(i % 10);
  return w;
}

workload gpt(int layers) {
  const std::string L = std::to_string(layers);
  workload w{"gpt" + L, "gpt:layers=" + L + ",dim=256,heads=8,context=128", "gpt:" + L + ",256,8,128",
             tensor::from_shape({64, 128}), tensor::from_shape({64, 128}), 128, 8};
  for (std::size_t i = 0; i < w.inputs.size(); ++i) {
    w.inputs.data()[i] = static_cast<float>((i * 37 + 11) % 256);
    w.labels.data()[i] = static_cast<float>((i * 53 + 7) % 256);
  }
  return w;
}

// One way of running: D replicas x P stages (0: no pipeline) x T ranks, each rank on `threads` intra-op threads;
// or, with `by_cost` cores, P stages sharing them by stage cost (Note [cores by stage cost] in plan/cores.hpp).
struct configuration {
  int D = 1, P = 0, T = 1, threads = 1, by_cost = 0;
  std::string name() const {
    std::string n = P == 0 && D == 1 && T == 1 ? "1 process" : "";
    if (D > 1) n += "D=" + std::to_string(D);
    if (P > 0) n += std::string(n.empty() ? "" : " x ") + "P=" + std::to_string(P);
    if (T > 1) n += std::string(n.empty() ? "" : " x ") + "T=" + std::to_string(T);
    if (by_cost > 0) return n + ", " + std::to_string(by_cost) + " cores by stage cost";
    return n + ", " + std::to_string(threads) + (threads == 1 ? " thread" : " threads") + " each";
  }
  int cores() const { return by_cost > 0 ? by_cost : D * std::max(P, 1) * T * threads; }
};

std::unique_ptr<step_runner> make_runner(const configuration& c, sequential& m, const optimizer_config& opt,
                                         const std::string& schedule, const std::vector<int>& cores,
                                         const tensor& inputs) {
  if (c.P == 0 && c.D == 1 && c.T == 1) {
    set_compute_threads(c.threads);
    return std::make_unique<local_runner>(m, opt);
  }
  if (c.P == 0) {
    data_tensor_options o;
    o.data_parallel = c.D;
    o.tensor_parallel = c.T;
    o.threads = c.threads;
    return std::make_unique<data_tensor_runner>(m, opt, "cross_entropy", o);
  }
  pipeline_options o;
  o.stages = c.P;
  o.microbatches = 8;
  o.schedule = schedule;
  o.layers_per_chunk = partition_counts(partition_method::parameters, m, {}, c.P);
  if (c.by_cost > 0) {  // one thread's layer costs on one microbatch, as train measures them
    const auto costs = measure_layer_costs(m, slice_rows(inputs, 0, inputs.shape()[0] / 8), 2, 1);
    const auto busy = predicted_busy_s(costs, chunk_ranges_from_counts(o.layers_per_chunk, m.size()), c.P, 8);
    o.cores = assign_cores(std::vector<int>(cores.begin(), cores.begin() + c.by_cost),
                           threads_by_cost(busy, c.by_cost));
  }
  o.optimizer = opt;
  o.tensor_parallel = c.T;
  o.threads = c.threads;
  o.compute_dtype = m.compute_dtype();
  return std::make_unique<data_parallel_pipeline>(m, o, c.D);
}

// PyTorch on the same model and split of the cores: its per-second rate, or 0 when it cannot run.
double torch_rate(const std::string& script, const workload& w, const configuration& c, const std::string& dtype,
                  int steps) {
  std::ostringstream cmd;
  const int batch = static_cast<int>(w.inputs.shape()[0]);
  const std::string common = " " + w.torch_spec + " --batch " + std::to_string(batch) + " --steps " +
                             std::to_string(steps) + " --dtype " + (dtype == "bfloat16" ? "bf16" : "fp32");
  if (c.P == 0 && c.D == 1 && c.T == 1)
    cmd << "python3 " << script << " single" << common << " --threads " << c.threads;
  else if (c.P == 0 && c.T == 1)
    cmd << "python3 " << script << " ddp" << common << " --stages " << c.D << " --threads " << c.threads;
  else  // a pipeline (its T or D folded into the threads of each of P stages: the same cores)
    cmd << "python3 " << script << " pipe" << common << " --stages " << std::max(c.P, 1)
        << " --threads " << c.cores() / std::max(c.P, 1) << " --microbatches 8";
  cmd << " 2>/dev/null";
  FILE* p = popen(cmd.str().c_str(), "r");
  if (!p) return 0.0;
  std::string out;
  char buf[4096];
  while (fgets(buf, sizeof buf, p)) out += buf;
  pclose(p);
  const std::size_t brace = out.rfind('{');
  if (brace == std::string::npos) return 0.0;
  try {
    return nlohmann::json::parse(out.substr(brace)).at("per_s").get<double>();
  } catch (const std::exception&) {
    return 0.0;
  }
}

std::vector<configuration> sweep(int n, const workload& w) {
  std::vector<configuration> cs;
  const auto splits = [&](int k) { return w.heads == 0 ? 2048 % k == 0 : static_cast<int>(w.heads) % k == 0; };
  for (int t = 1; t < n; t *= 2) cs.push_back({1, 0, 1, t});
  cs.push_back({1, 0, 1, n});
  for (int k = 2; k <= n; k *= 2) cs.push_back({k, 0, 1, n / k});  // D alone, the cores shared out
  for (int k = 2; k <= std::min(n, 8); k *= 2)
    if (splits(k)) cs.push_back({1, 0, k, n / k});  // T alone
  for (int p = 1; p <= std::min(n, 4); p *= 2) cs.push_back({1, p, 1, 1});  // P alone, one thread a stage
  for (int p = 2; p <= std::min(n, 8); p *= 2) {
    if (n / p > 1) cs.push_back({1, p, 1, n / p});                          // P x threads
    if (n / p > 1) cs.push_back({1, p, 1, 0, n});                           // P, the cores by stage cost
    if (n / p > 1) cs.push_back({n / p, p, 1, 1});                          // P x D
    if (n / p > 1 && splits(n / p)) cs.push_back({1, p, n / p, 1});        // P x T
  }
  if (n >= 2) cs.push_back({1, 1, 1, n});  // one stage on every core: the pipeline's overhead alone
  return cs;
}

}  // namespace

int main(int argc, char** argv) try {
  keep_tensor_memory();
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // line by line: a run cut short by a time limit keeps what it measured
  int steps = 3, rounds = 3, max_cores = 0;
  std::string models = "mlp,gpt4,gpt16", dtype_text = "float32", only, schedule = "zb-h1";
  std::string torch_script = std::string(AP_SOURCE_DIR) + "/bench/torch_cpu_bench.py";
  bool use_torch = true;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--steps" && i + 1 < argc) steps = std::stoi(argv[++i]);
    else if (a == "--rounds" && i + 1 < argc) rounds = std::stoi(argv[++i]);
    else if (a == "--models" && i + 1 < argc) models = argv[++i];
    else if (a == "--dtype" && i + 1 < argc) dtype_text = argv[++i];
    else if (a == "--torch" && i + 1 < argc) torch_script = argv[++i];
    else if (a == "--no-torch") use_torch = false;
    else if (a == "--max-cores" && i + 1 < argc) max_cores = std::stoi(argv[++i]);
    else if (a == "--only" && i + 1 < argc) only = argv[++i];
    else if (a == "--schedule" && i + 1 < argc) schedule = argv[++i];
    else throw std::invalid_argument("unknown flag " + a);
  }
  const dtype type = dtype_text == "bfloat16" ? dtype::bfloat16 : dtype::float32;
  std::vector<int> cores = process_cores();
  if (max_cores > 0 && static_cast<int>(cores.size()) > max_cores) cores.resize(static_cast<std::size_t>(max_cores));
  const int n = static_cast<int>(cores.size());
  use_torch = use_torch && std::system(("python3 -c 'import torch' >/dev/null 2>&1 && test -f " + torch_script).c_str()) == 0;
  std::printf("bench_scaling: %d cores, %s, pipelines %s (PyTorch's 1f1b), PyTorch %s, load %s\n", n,
              dtype_text.c_str(), schedule.c_str(),
              use_torch ? torch_script.c_str() : "not available", bench::load_average().c_str());
  nlohmann::json results = nlohmann::json::array();
  std::vector<workload> ws;
  if (models.find("mlp") != std::string::npos) ws.push_back(mlp());
  if (models.find("gpt4") != std::string::npos) ws.push_back(gpt(4));
  if (models.find("gpt16") != std::string::npos) ws.push_back(gpt(16));
  optimizer_config opt;
  opt.kind = "adam";
  for (const workload& w : ws) {
    struct run {
      configuration c;
      std::unique_ptr<sequential> model;
      std::unique_ptr<step_runner> runner;
      std::vector<double> rates;
      std::uint64_t step = 0;
      double torch = 0.0;
      std::string refused;  // why the model cannot run this way (e.g. no Linear pair per stage to split over T)
    };
    std::vector<run> runs;
    for (const configuration& c : sweep(n, w)) {
      if (!runs.empty() && !only.empty() && !bench::matches_any(c.name(), only)) continue;
      run r{c, std::make_unique<sequential>(sequential::from_spec(w.spec)), nullptr, {}, 0, 0.0, {}};
      r.model->set_compute_dtype(type);
      runs.push_back(std::move(r));
    }
    const double units = static_cast<double>(w.inputs.shape()[0] * w.tokens_per_sample);
    for (int round = 0; round < rounds; ++round)
      for (run& r : runs) {
        if (!r.refused.empty()) continue;
        // Note [idle teams]: one configuration's threads at a time. Each is built for its block and gone after it
        // (the single process's team too), so no idle team of another configuration makes libgomp's threads
        // sleep at every region's end; its oneDNN primitives are made again, in a warm-up step, every round.
        try {
          r.runner = make_runner(r.c, *r.model, opt, schedule, cores, w.inputs);
        } catch (const std::invalid_argument& e) {
          r.refused = e.what();
          continue;
        }
        for (int s = 0; s < (round == 0 ? 2 : 1); ++s) r.runner->train_step(w.inputs, w.labels, r.step++);
        const auto t0 = std::chrono::steady_clock::now();
        for (int s = 0; s < steps; ++s) r.runner->train_step(w.inputs, w.labels, r.step++);
        r.rates.push_back(units * steps / std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        std::printf("  measured %s, round %d: %.0f per second\n", r.c.name().c_str(), round + 1, r.rates.back());
        r.runner.reset();
        set_compute_threads(1);
      }
    if (use_torch)
      for (run& r : runs)
        if (r.refused.empty()) {
          r.torch = torch_rate(torch_script, w, r.c, dtype_text, std::max(steps * rounds, 5));
          std::printf("  PyTorch %s: %.0f per second\n", r.c.name().c_str(), r.torch);
        }
    const double one = bench::median(runs[0].rates);
    std::printf("\n%s (batch %zu), %s per second, median of %d rounds of %d steps; load %s\n", w.spec.c_str(),
                w.inputs.shape()[0], w.tokens_per_sample > 1 ? "tokens" : "samples", rounds, steps,
                bench::load_average().c_str());
    std::printf("  %-34s %6s %12s %11s %12s %8s\n", "configuration", "cores", "actorpipe", "efficiency", "PyTorch",
                "ratio");
    for (run& r : runs) {
      if (!r.refused.empty()) {
        std::printf("  %-34s %6d   refused: %s\n", r.c.name().c_str(), r.c.cores(), r.refused.c_str());
        continue;
      }
      const double rate = bench::median(r.rates);
      const double efficiency = rate / (one * r.c.cores());
      std::printf("  %-34s %6d %12.0f %11.2f %12s %8s\n", r.c.name().c_str(), r.c.cores(), rate, efficiency,
                  r.torch > 0 ? std::to_string(static_cast<long>(r.torch)).c_str() : "-",
                  r.torch > 0 ? (std::to_string(rate / r.torch).substr(0, 4) + "x").c_str() : "-");
      results.push_back({{"model", w.spec}, {"D", r.c.D}, {"P", r.c.P}, {"T", r.c.T}, {"threads", r.c.threads},
                         {"cores", r.c.cores()}, {"cores_by_stage_cost", r.c.by_cost > 0}, {"per_s", rate},
                         {"efficiency", efficiency}, {"torch_per_s", r.torch}});
    }
  }
  std::cout << nlohmann::json{{"bench", "scaling"}, {"cores", n}, {"dtype", dtype_text}, {"results", results}}.dump() << "\n";
  return 0;
} catch (const std::exception& e) {
  std::cerr << "bench_scaling: " << e.what() << "\n";
  return 1;
}

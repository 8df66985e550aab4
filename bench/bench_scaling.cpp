// bench_scaling: how each way of running uses the cores (Note [cores per rank]), beside PyTorch where python3 has
// it: one process, data, tensor and pipeline parallelism and their meshes (sweep); what overlapping tensor-parallel
// all-reduces saves (tp-overlap); whether `train --auto` picks as well as a grid of configurations (auto).
//
// Usage: bench_scaling [sweep|tp-overlap|auto] [OPTIONS]   (--help lists each mode's options)
#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "../tests/node_process.hpp"
#include "actors/data_parallel_pipeline.hpp"
#include "bench/bench_support.hpp"
#include "collective/local_group.hpp"
#include "model/gpt_spec.hpp"
#include "model/sequential.hpp"
#include "model/tensor_parallel.hpp"
#include "plan/cores.hpp"
#include "plan/partition.hpp"
#include "random/seeded_random.hpp"
#include "tensor/compute.hpp"
#include "training/data_tensor_runner.hpp"
#include "training/trainer.hpp"

namespace {

using namespace ap;
using bench::clock_type;
using bench::seconds_since;

// ---- sweep: every way of using the cores this process may use (n), in one run
// One process at 1, 2, 4, ... n threads; D, T and P alone; P x threads, P x D, P x T filling the cores; P stages
// sharing the cores by stage cost (Note [cores by stage cost]); one-stage pipelines. Each configuration is built
// anew every round (Note [idle teams]) and runs --rounds times, alternating; printed: the median rate and its
// efficiency, rate / (one thread's rate x cores), and PyTorch's ratio where `import torch` works.
// --only keeps the configurations whose name contains one of its ';'-separated texts.
namespace sweep {

struct workload {
  std::string key, spec, torch_spec;
  tensor inputs, labels;
  std::size_t tokens_per_sample = 1;
  std::size_t heads = 0;  // T must divide them (0: an MLP)
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
// or, with `by_cost` cores, P stages sharing them by stage cost.
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
  if (c.by_cost > 0) {  // one thread's layer costs on one microbatch
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

// PyTorch's rate on the same model and split of the cores, or 0 when it cannot run.
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
  else  // a pipeline: its T or D folded into each stage's threads
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

std::vector<configuration> configurations(int n, const workload& w) {
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
  if (n >= 2) {
    cs.push_back({1, 1, 1, n});  // one stage on every core: the pipeline's overhead alone
    cs.push_back({2, 1, 1, n / 2});
    if (splits(2)) cs.push_back({1, 1, 2, n / 2});
  }
  return cs;
}

int run(bench::arguments& args) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // line by line: a run cut short keeps what it measured
  const int steps = static_cast<int>(args.integer("--steps", 3, 1)), rounds = static_cast<int>(args.integer("--rounds", 3, 1));
  const int max_cores = static_cast<int>(args.integer("--max-cores", 0));
  const std::string models = args.text("--models", "mlp,gpt4,gpt16"), dtype_text = args.text("--dtype", "float32");
  const std::string only = args.text("--only", ""), schedule = args.text("--schedule", "zb-h1");
  const std::string torch_script = args.text("--torch", std::string(AP_SOURCE_DIR) + "/bench/torch_cpu_bench.py");
  bool use_torch = !args.flag("--no-torch");
  args.done();
  if (dtype_text != "float32" && dtype_text != "bfloat16") throw bench::usage_error("--dtype is float32 or bfloat16, not " + dtype_text);
  keep_tensor_memory();
  const dtype type = dtype_text == "bfloat16" ? dtype::bfloat16 : dtype::float32;
  std::vector<int> cores = process_cores();
  if (max_cores > 0 && static_cast<int>(cores.size()) > max_cores) cores.resize(static_cast<std::size_t>(max_cores));
  const int n = static_cast<int>(cores.size());
  use_torch = use_torch && std::system(("python3 -c 'import torch' >/dev/null 2>&1 && test -f " + torch_script).c_str()) == 0;
  std::printf("bench_scaling: %d cores, %s, pipelines %s (PyTorch's 1f1b), PyTorch %s, load %s\n", n,
              dtype_text.c_str(), schedule.c_str(), use_torch ? torch_script.c_str() : "not available",
              bench::load_average().c_str());
  nlohmann::json results = nlohmann::json::array();
  std::vector<workload> ws;
  if (models.find("mlp") != std::string::npos) ws.push_back(mlp());
  if (models.find("gpt4") != std::string::npos) ws.push_back(gpt(4));
  if (models.find("gpt16") != std::string::npos) ws.push_back(gpt(16));
  if (ws.empty()) throw bench::usage_error("--models names none of mlp, gpt4, gpt16: " + models);
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
      std::string refused;  // why the model cannot run this way
    };
    std::vector<run> runs;
    for (const configuration& c : configurations(n, w)) {
      if (!runs.empty() && !only.empty() && !bench::matches_any(c.name(), only)) continue;
      run r{c, std::make_unique<sequential>(sequential::from_spec(w.spec)), nullptr, {}, 0, 0.0, {}};
      r.model->set_compute_dtype(type);
      runs.push_back(std::move(r));
    }
    const double units = static_cast<double>(w.inputs.shape()[0] * w.tokens_per_sample);
    for (int round = 0; round < rounds; ++round)
      for (run& r : runs) {
        if (!r.refused.empty()) continue;
        // One configuration's threads at a time (Note [idle teams]).
        try {
          r.runner = make_runner(r.c, *r.model, opt, schedule, cores, w.inputs);
        } catch (const std::invalid_argument& e) {
          r.refused = e.what();
          continue;
        }
        for (int s = 0; s < (round == 0 ? 2 : 1); ++s) r.runner->train_step(w.inputs, w.labels, r.step++);
        const auto t0 = clock_type::now();
        for (int s = 0; s < steps; ++s) r.runner->train_step(w.inputs, w.labels, r.step++);
        r.rates.push_back(units * steps / seconds_since(t0));
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
  std::cout << nlohmann::json{{"bench", "bench_scaling sweep"}, {"cores", n}, {"dtype", dtype_text}, {"results", results}}.dump()
            << "\n";
  return 0;
}

}  // namespace sweep

// ---- tp-overlap: what overlapping tensor-parallel all-reduces with the weight gradients saves
// T ranks of a local_group run the Megatron MLP and a GPT block, the backward fused (Note [overlapped backward])
// and in turn (backward_input, then backward_weight), alternating; both give the same bits. Printed: the
// backward's median time and the ranks' time blocked in all-reduce waits.
namespace tp_overlap {

// A group member adding its caller's wait() time to `waited` (seconds).
class timed_group final : public process_group {
 public:
  timed_group(std::unique_ptr<process_group> inner, double* waited) : inner_(std::move(inner)), waited_(waited) {}
  const std::string& name() const override { return inner_->name(); }
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  collective_handle all_reduce(tensor& t, reduce_op op) override { return timed(inner_->all_reduce(t, op)); }
  collective_handle reduce_scatter(const tensor& in, tensor& out, reduce_op op) override {
    return timed(inner_->reduce_scatter(in, out, op));
  }
  collective_handle all_gather(const tensor& in, tensor& out) override { return timed(inner_->all_gather(in, out)); }
  collective_handle broadcast(tensor& t, int root) override { return timed(inner_->broadcast(t, root)); }
  void abort(const std::string& reason) override { inner_->abort(reason); }

 private:
  struct timed_state final : collective_handle::state {
    collective_handle inner;
    double* waited;
    void wait() override {
      const auto t0 = clock_type::now();
      inner.wait();
      *waited += seconds_since(t0);
    }
    bool ready() const override { return inner.ready(); }
  };
  collective_handle timed(collective_handle h) {
    auto st = std::make_shared<timed_state>();
    st->inner = std::move(h);
    st->waited = waited_;
    return collective_handle(st);
  }
  std::unique_ptr<process_group> inner_;
  double* waited_;
};

tensor random_tensor(const std::vector<std::size_t>& shape, std::uint64_t seed) {
  tensor t = tensor::from_shape(shape);
  for (std::size_t i = 0; i < t.size(); ++i) t.data()[i] = symmetric_unit_float(hash_counters(seed, i));
  return t;
}

struct way_result {
  std::vector<double> backward_s;  // per repeat: the slowest rank's backward
  std::vector<double> waited_s;    // per repeat: the slowest rank's time blocked in backward all-reduces
};

// `repeats` forward and backward steps of `specs` on T ranks, the backward overlapped or in turn.
way_result run_way(const std::vector<std::string>& specs, const std::vector<std::size_t>& x_shape, int ranks,
                   int threads, int repeats, bool overlapped) {
  local_group group("tp", ranks);
  const tensor x = random_tensor(x_shape, 1), dy = random_tensor(x_shape, 2);
  std::vector<std::vector<double>> backward(ranks, std::vector<double>(repeats)), waited = backward;
  std::vector<std::thread> workers;
  for (int r = 0; r < ranks; ++r)
    workers.emplace_back([&, r] {
      use_compute_cores({threads, {}});
      double waiting = 0.0;
      sequential model = sequential::from_layer_specs(specs);
      join_tensor_parallel(model, std::make_shared<timed_group>(group.member(r), &waiting));
      model.initialize(7);
      for (int k = -1; k < repeats; ++k) {  // k = -1: warm-up
        std::vector<layer_cache> caches(model.size());
        tensor h = x;
        for (std::size_t i = 0; i < model.size(); ++i) h = model.at(i).forward(h, caches[i], {});
        waiting = 0.0;
        const auto t0 = clock_type::now();
        tensor d = dy;
        for (std::size_t i = model.size(); i-- > 0;) {
          tensor below;
          if (overlapped) {
            model.at(i).backward(d, caches[i], &below);
          } else {
            model.at(i).backward_input(d, caches[i], &below);
            model.at(i).backward_weight(d, caches[i]);
          }
          d = std::move(below);
        }
        if (k >= 0) {
          backward[r][k] = seconds_since(t0);
          waited[r][k] = waiting;
        }
      }
    });
  for (auto& w : workers) w.join();
  way_result out;
  for (int k = 0; k < repeats; ++k) {
    double b = 0.0, w = 0.0;
    for (int r = 0; r < ranks; ++r) b = std::max(b, backward[r][k]), w = std::max(w, waited[r][k]);
    out.backward_s.push_back(b);
    out.waited_s.push_back(w);
  }
  return out;
}

int run(bench::arguments& args) {
  const int ranks = static_cast<int>(args.integer("--ranks", 2, 1)), threads = static_cast<int>(args.integer("--threads", 1, 1));
  const int repeats = static_cast<int>(args.integer("--repeats", 9, 1));
  const auto rows = static_cast<std::size_t>(args.integer("--rows", 1024, 1));
  const auto width = static_cast<std::size_t>(args.integer("--width", 1024, 64));
  args.done();
  if (width % 64 != 0) throw bench::usage_error("--width must be a multiple of 64 (64 dimensions a head)");
  const std::string w = std::to_string(width), hidden = std::to_string(4 * width);
  struct model_case {
    std::string name;
    std::vector<std::string> specs;
    std::vector<std::size_t> x_shape;
  };
  const std::size_t context = 128;
  const std::vector<model_case> cases = {
      {"MLP " + w + "-" + hidden + "-" + w + ", " + std::to_string(rows) + " rows",
       {"column_linear:" + w + ":" + hidden, "gelu", "row_linear:" + hidden + ":" + w},
       {rows, width}},
      {"GPT block dim " + w + ", " + std::to_string(width / 64) + " heads, " + std::to_string(rows / context) +
           " x " + std::to_string(context) + " tokens",
       tensor_parallel_specs({gpt_block_spec(width, width / 64)}),
       {rows / context, context, width}},
  };
  std::printf("bench_scaling tp-overlap: T=%d ranks x %d thread(s), %u cores, load %s, median of %d steps\n", ranks,
              threads, std::thread::hardware_concurrency(), bench::load_average().c_str(), repeats);
  std::printf("%-44s %-11s %14s %22s\n", "model", "backward", "ms per step", "ms blocked in waits");
  nlohmann::json out = nlohmann::json::array();
  for (const model_case& c : cases) {
    way_result turn, over;
    for (int round = 0; round < 2; ++round) {  // alternating, twice
      const way_result t = run_way(c.specs, c.x_shape, ranks, threads, repeats, false);
      const way_result o = run_way(c.specs, c.x_shape, ranks, threads, repeats, true);
      turn.backward_s.insert(turn.backward_s.end(), t.backward_s.begin(), t.backward_s.end());
      turn.waited_s.insert(turn.waited_s.end(), t.waited_s.begin(), t.waited_s.end());
      over.backward_s.insert(over.backward_s.end(), o.backward_s.begin(), o.backward_s.end());
      over.waited_s.insert(over.waited_s.end(), o.waited_s.begin(), o.waited_s.end());
    }
    const double tb = bench::median(turn.backward_s) * 1e3, tw = bench::median(turn.waited_s) * 1e3;
    const double ob = bench::median(over.backward_s) * 1e3, ow = bench::median(over.waited_s) * 1e3;
    std::printf("%-44s %-11s %14.2f %22.2f\n", c.name.c_str(), "in turn", tb, tw);
    std::printf("%-44s %-11s %14.2f %22.2f   (%.2fx the time)\n", "", "overlapped", ob, ow, ob / tb);
    out.push_back({{"model", c.name}, {"in_turn_ms", tb}, {"in_turn_waits_ms", tw}, {"overlapped_ms", ob},
                   {"overlapped_waits_ms", ow}, {"ratio", ob / tb}});
  }
  std::cout << nlohmann::json{{"bench", "bench_scaling tp-overlap"}, {"ranks", ranks}, {"threads", threads},
                              {"models", out}}.dump()
            << std::endl;
  return 0;
}

}  // namespace tp_overlap

// ---- auto: does `actorpipe train --auto` choose well?
// Runs `train --auto` and a grid of hand-picked configurations, each its own `actorpipe` process, in rounds;
// prints each one's median rate and --auto's ratio to the grid's best. With `--nodes N` the runs use N
// `actorpipe node` processes on one machine (Note [auto on nodes]).
namespace auto_choice {

struct run_figures {
  double samples_per_s = 0.0;
  double total_s = 0.0;  // the whole process: data, planning, training
  std::string choice;    // --auto's
};

// Runs `command`, returns the JSON line it printed on stdout.
run_figures run_train(const std::string& command) {
  const auto t0 = clock_type::now();
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen((command + " 2>/dev/null").c_str(), "r"), pclose);
  if (!pipe) throw std::runtime_error("cannot run " + command);
  std::string out;
  std::array<char, 4096> buffer{};
  while (fgets(buffer.data(), buffer.size(), pipe.get())) out += buffer.data();
  run_figures f;
  f.total_s = seconds_since(t0);
  const auto start = out.rfind("\n{", out.size() > 1 ? out.size() - 2 : 0);
  const std::string line = out.substr(start == std::string::npos ? 0 : start + 1);
  if (line.empty() || line.front() != '{') throw std::runtime_error("no JSON line from: " + command);
  const auto j = nlohmann::json::parse(line);
  // The steady pace: a step's samples over the median step.
  f.samples_per_s = j.at("samples_per_s").get<double>() * j.at("wall_s").get<double>() /
                    (j.at("steps").get<double>() * j.at("median_step_s").get<double>());
  if (j.contains("auto")) f.choice = j.at("auto").at("choice").get<std::string>();
  return f;
}

using grid = std::vector<std::pair<std::string, std::string>>;  // name, `train` flags

grid in_process(int cores) {
  const std::string n = std::to_string(cores), t = std::to_string(std::max(1, cores / 2));
  const std::string threads = t + (t == "1" ? " thread" : " threads");
  grid g = {
      {"single 1 thread", "--threads 1"},
      {"single " + n + " threads", "--threads " + n},
      {"D=" + n + " x 1 thread", "--data-parallel " + n + " --threads 1"},
      {"T=2 x " + threads, "--tensor-parallel 2 --threads " + t},
  };
  for (const char* schedule : {"gpipe", "1f1b", "zb-h1"})
    for (int m : {4, 8})
      g.push_back({std::string("P=2 ") + schedule + " m=" + std::to_string(m) + " x " + threads,
                   std::string("--stages 2 --partition time --schedule ") + schedule + " --microbatches " +
                       std::to_string(m) + " --threads " + t});
  return g;
}

// The grid on nodes of one machine, sharing its cores (Note [cores on nodes]): pipelines only.
grid on_nodes(int cores) {
  const std::string n = std::to_string(cores), half = std::to_string(std::max(1, cores / 2));
  const std::string halves = half + (half == "1" ? " thread" : " threads");
  grid g = {
      {"P=1 x " + n + " threads", "--stages 1 --microbatches 1 --threads " + n},
      {"P=1 T=2 x " + halves, "--stages 1 --microbatches 1 --tensor-parallel 2 --threads " + half},
      {"P=1 D=2 x " + halves + ", 2 nodes", "--stages 1 --microbatches 1 --data-parallel 2 --threads " + half},
  };
  for (const char* schedule : {"gpipe", "1f1b", "zb-h1"})
    for (int m : {4, 8})
      g.push_back({std::string("P=2 ") + schedule + " m=" + std::to_string(m) + " x " + halves,
                   std::string("--stages 2 --partition time --schedule ") + schedule + " --microbatches " +
                       std::to_string(m) + " --threads " + half});
  return g;
}

int run(bench::arguments& args) {
  const std::string models = args.text("--models", "mlp,heavy,gpt");
  const int steps = static_cast<int>(args.integer("--steps", 20, 1)), rounds = static_cast<int>(args.integer("--rounds", 3, 1));
  const int node_count = static_cast<int>(args.integer("--nodes", 0));
  args.done();
  const std::vector<std::string> actorpipe = bench::actorpipe_command();
  const int cores = static_cast<int>(process_cores().size());
  const std::map<std::string, std::pair<std::string, std::string>> known = {  // key: description, `train` flags
      {"mlp", {"mlp 784-512-256-10, batch 128", "--model 784-512-256-10 --batch-size 128"}},
      {"heavy", {"mlp 784-2048-2048-2048-10, batch 512", "--model 784-2048-2048-2048-10 --batch-size 512"}},
      {"gpt", {"gpt:layers=4,dim=128,heads=4,context=64, batch 32",
               "--model gpt:layers=4,dim=128,heads=4,context=64 --batch-size 32"}},
  };
  const std::vector<std::string> keys = split_fields(models, ',');
  for (const std::string& key : keys)
    if (!known.count(key)) throw bench::usage_error("unknown model " + key + " in --models (mlp, heavy, gpt)");
  std::vector<std::unique_ptr<test::node_process>> nodes;
  std::string node_flags;  // the flags that put a run on them
  for (int i = 0; i < node_count; ++i) {
    nodes.push_back(std::make_unique<test::node_process>(actorpipe, std::vector<std::string>{"--insecure"}));
    node_flags += (i == 0 ? " --insecure --nodes " : ",") + nodes.back()->address();
  }
  nlohmann::json all;
  all["bench"] = "bench_scaling auto";
  for (const std::string& key : keys) {
    const auto& [description, flags] = known.at(key);
    const std::string base = bench::shell_line(actorpipe) + " train " + flags + " --max-steps " + std::to_string(steps) + node_flags + " ";
    const grid configurations = nodes.empty() ? in_process(cores) : on_nodes(cores);
    std::vector<std::vector<double>> rates(configurations.size());
    std::vector<double> auto_rates, auto_total;
    std::map<std::string, int> choices;
    for (int r = 0; r < rounds; ++r) {
      const run_figures a = run_train(base + "--auto");
      auto_rates.push_back(a.samples_per_s), auto_total.push_back(a.total_s), ++choices[a.choice];
      for (std::size_t c = 0; c < configurations.size(); ++c)
        rates[c].push_back(run_train(base + configurations[c].second).samples_per_s);
    }
    std::printf("\nbench_scaling auto, %s: %d steps, %d rounds, %d cores%s (median samples/s), load %s\n",
                description.c_str(), steps, rounds, cores,
                nodes.empty() ? "" : (", " + std::to_string(nodes.size()) + " nodes").c_str(),
                bench::load_average().c_str());
    double best = 0.0;
    std::string best_name;
    nlohmann::json row;
    for (std::size_t c = 0; c < configurations.size(); ++c) {
      const double rate = bench::median(rates[c]);
      std::printf("  %-34s %10.0f\n", configurations[c].first.c_str(), rate);
      row[configurations[c].first] = rate;
      if (rate > best) best = rate, best_name = configurations[c].first;
    }
    const double chosen = bench::median(auto_rates);
    std::printf("  %-34s %10.0f  (%.2fx the grid's best, %s; whole --auto process %.1f s)\n", "--auto", chosen,
                chosen / best, best_name.c_str(), bench::median(auto_total));
    for (const auto& [choice, times] : choices) std::printf("    --auto chose %dx: %s\n", times, choice.c_str());
    all[key] = {{"grid", row}, {"auto", chosen}, {"best", best_name}, {"ratio", chosen / best},
                {"auto_process_s", bench::median(auto_total)}};
  }
  std::cout << all.dump() << std::endl;
  return 0;
}

}  // namespace auto_choice

}  // namespace

int main(int argc, char** argv) {
  return bench::run_mode(
      argc, argv, "bench_scaling",
      {{"sweep", "[--models mlp,gpt4,gpt16] [--steps N] [--rounds R] [--dtype float32|bfloat16] [--schedule S] "
                 "[--torch PATH | --no-torch] [--max-cores N] [--only TEXT;...]",
        "every way of using the cores (one process, D, T, P and their meshes), beside PyTorch", sweep::run},
       {"tp-overlap", "[--ranks T] [--threads K] [--rows N] [--width D] [--repeats R]",
        "a tensor-parallel backward with its all-reduces overlapped against the same in turn", tp_overlap::run},
       {"auto", "[--models mlp,heavy,gpt] [--steps N] [--rounds R] [--nodes N]",
        "`train --auto` against a grid of hand-picked configurations", auto_choice::run}});
}

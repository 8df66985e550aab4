// bench_bf16: fp32 vs bf16 training (Note [compute dtype] in model/layer.hpp) in one run, on the heavy MLP
// 784-2048-2048-2048-10 with batch 256 and Adam:
//   - samples/s of a single process (its compute threads: --threads, default every core) and of a 2-stage
//     1F1B pipeline (m=8, one thread per stage), each dtype timed in alternating rounds (Note [timing under
//     load] in bench_single_process.cpp), medians;
//   - peak activation bytes: the single process's cache after a forward of the whole batch, and each
//     stage's peak stash over a step;
//   - bytes on the wire per step between two nodes (two actor systems in this process, each publishing an
//     `actorpipe node` actor on loopback; stage s on node s): every tensor byte this process serialised
//     (network/wire_format.hpp counts them by dtype). Between the stages flow the activations and their
//     gradients (bfloat16 in bf16); the coordinator's inputs, outputs and loss gradients are float32 in both.
//   - a GPT (--gpt SPEC, default gpt:layers=4,dim=256,heads=8,context=128; batch 16 sequences of random bytes,
//     AdamW): tokens/s of the single process and of 2 stages (ZB-H1, m=4), and the stages' peak stash.
//
// Usage: bench_bf16 [--steps N (timed steps per round, default 8)] [--rounds R (default 3)] [--threads T]
//                   [--no-nodes] [--model SPEC] [--gpt SPEC | --no-gpt]
// Prints a table, then one JSON line.
#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <nlohmann/json.hpp>

#include "actors/node.hpp"
#include "actors/pipeline.hpp"
#include "bench/bench_support.hpp"
#include "data/synthetic.hpp"
#include "data/text_corpus.hpp"
#include "model/gpt_spec.hpp"
#include "random/seeded_random.hpp"
#include "network/wire_format.hpp"
#include "tensor/compute.hpp"
#include "training/trainer.hpp"

using namespace ap;
using clock_type = std::chrono::steady_clock;

namespace {

struct settings {
  int steps = 8, rounds = 3, threads = 0;
  bool nodes = true;
  std::string model = "784-2048-2048-2048-10";
  std::string gpt = "gpt:layers=4,dim=256,heads=8,context=128";  // empty: no GPT runs
  std::size_t gpt_batch = 16;
  std::size_t batch = 256;
  int microbatches = 8;
};

const dtype both[] = {dtype::float32, dtype::bfloat16};

sequential make_model(const settings& s, dtype type) {
  sequential m = sequential::from_spec(s.model, sequential_options{"relu", 1});
  m.set_compute_dtype(type);
  return m;
}

optimizer_config adam() {
  optimizer_config o;
  o.kind = "adam";
  o.lr = 1e-3f;
  return o;
}

// Seconds per step of `steps` steps of `runner` on batches cycled from `d`.
double time_steps(step_runner& runner, const dataset& d, std::size_t batch, int steps, std::uint64_t& step) {
  const std::size_t batches = rows(d.inputs) / batch;
  const auto t0 = clock_type::now();
  for (int i = 0; i < steps; ++i, ++step) {
    const std::size_t b = step % batches;
    runner.train_step(slice_rows(d.inputs, b * batch, (b + 1) * batch), slice_rows(d.labels, b * batch, (b + 1) * batch),
                      step);
  }
  return std::chrono::duration<double>(clock_type::now() - t0).count() / steps;
}

// Two in-process nodes (actor systems with a published node actor), stopped and destroyed on this thread.
struct local_nodes {
  std::vector<std::unique_ptr<caf::actor_system_config>> configs;
  std::vector<std::unique_ptr<caf::actor_system>> systems;
  std::vector<caf::actor> nodes;
  std::vector<std::string> addresses;
  explicit local_nodes(int n) {
    for (int i = 0; i < n; ++i) {
      configs.push_back(std::make_unique<caf::actor_system_config>());
      enable_network(*configs.back());
      configs.back()->set("scheduler.max-threads", 2);
      systems.push_back(std::make_unique<caf::actor_system>(*configs.back()));
      nodes.push_back(spawn_node(*systems.back(), node_options{}));
      auto port = systems.back()->middleman().publish(nodes.back(), 0, "127.0.0.1", true);
      if (!port) throw std::runtime_error("bench_bf16: cannot publish a node: " + caf::to_string(port.error()));
      addresses.push_back("127.0.0.1:" + std::to_string(*port));
    }
  }
  ~local_nodes() {
    for (auto& n : nodes) caf::anon_send_exit(n, caf::exit_reason::user_shutdown);
    nodes.clear();
    systems.clear();
  }
};

struct pipeline_figures {
  std::vector<double> step_s;               // per round
  std::vector<std::uint64_t> peak_bytes;    // per stage
  double wire_bytes_per_step[dtype_count] = {0, 0};
};

}  // namespace

int main(int argc, char** argv) {
  keep_tensor_memory();
  settings s;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&] { return i + 1 < argc ? std::string(argv[++i]) : throw std::invalid_argument(a + " needs a value"); };
    if (a == "--steps") s.steps = std::stoi(next());
    else if (a == "--rounds") s.rounds = std::stoi(next());
    else if (a == "--threads") s.threads = std::stoi(next());
    else if (a == "--no-nodes") s.nodes = false;
    else if (a == "--model") s.model = next();
    else if (a == "--gpt") s.gpt = next();
    else if (a == "--no-gpt") s.gpt.clear();
    else {
      std::cerr << "usage: bench_bf16 [--steps N] [--rounds R] [--threads T] [--no-nodes] [--model SPEC] "
                   "[--gpt SPEC | --no-gpt]\n";
      return 2;
    }
  }
  const int threads = s.threads > 0 ? s.threads : single_process_threads();
  const dataset d = make_blobs(s.batch * 4, 784, 10, 7);
  std::printf("bench_bf16: model %s, batch %zu, Adam; load average before: %s\n", s.model.c_str(), s.batch,
              bench::load_average().c_str());

  // Single process.
  std::vector<double> single_s[2];
  std::uint64_t single_bytes[2] = {0, 0};
  {
    set_compute_threads(threads);
    std::vector<sequential> models;
    std::vector<std::unique_ptr<local_runner>> runners;
    for (dtype t : both) models.push_back(make_model(s, t));
    for (auto& m : models) runners.push_back(std::make_unique<local_runner>(m, adam()));
    std::uint64_t step[2] = {0, 0};
    for (int k = 0; k < 2; ++k) time_steps(*runners[k], d, s.batch, 2, step[k]);  // warm-up: primitives, memory
    for (int r = 0; r < s.rounds; ++r)
      for (int k = 0; k < 2; ++k) single_s[k].push_back(time_steps(*runners[k], d, s.batch, s.steps, step[k]));
    for (int k = 0; k < 2; ++k) {
      sequential_cache cache;
      models[k].forward(slice_rows(d.inputs, 0, s.batch), cache, forward_context{true, 0, 0});
      single_bytes[k] = stashed_bytes(cache);
    }
  }

  // A 2-stage pipeline in this process, then on two nodes. Note [idle teams] (tensor/compute.hpp): this thread's
  // single-process team goes, and each dtype's pipeline lives for its own block only (its warm-up step included),
  // so no idle team of the other makes libgomp's threads sleep at every region's end.
  set_compute_threads(1);
  const auto run_pipeline = [&](const std::vector<std::string>& nodes, pipeline_figures (&out)[2]) {
    const auto make_pipe = [&](dtype t) {
      pipeline_options o;
      o.stages = 2;
      o.microbatches = s.microbatches;
      o.schedule = "1f1b";
      o.optimizer = adam();
      o.compute_dtype = t;
      o.nodes = nodes;
      o.security.insecure = true;  // in-process nodes published on plain TCP: the payload bytes are what is counted
      return std::make_unique<pipeline>(make_model(s, dtype::float32), o);
    };
    std::uint64_t step[2] = {0, 0};
    for (int r = 0; r < s.rounds; ++r)
      for (int k = 0; k < 2; ++k) {
        const std::unique_ptr<pipeline> pipe = make_pipe(both[k]);
        time_steps(*pipe, d, s.batch, r == 0 ? 2 : 1, step[k]);  // warm-up: primitives, memory
        std::uint64_t before[dtype_count];
        for (dtype t : both) before[static_cast<int>(t)] = wire_tensor_bytes_sent(t);
        out[k].step_s.push_back(time_steps(*pipe, d, s.batch, s.steps, step[k]));
        for (dtype t : both)
          out[k].wire_bytes_per_step[static_cast<int>(t)] =
              double(wire_tensor_bytes_sent(t) - before[static_cast<int>(t)]) / s.steps;
        out[k].peak_bytes = pipe->last_peak_stash_bytes();
      }
  };
  pipeline_figures staged[2], noded[2];
  run_pipeline({}, staged);
  if (s.nodes) {
    local_nodes n(2);
    run_pipeline(n.addresses, noded);
  }

  // The GPT: single process, then 2 stages (ZB-H1, m=4), each dtype in alternating rounds.
  std::vector<double> gpt_single[2], gpt_staged[2];
  std::vector<std::uint64_t> gpt_peak[2];
  std::size_t gpt_tokens = 0;
  if (!s.gpt.empty()) {
    const auto make_gpt = [&](dtype t) {
      sequential m = sequential::from_spec(s.gpt, sequential_options{"relu", 1});
      m.set_compute_dtype(t);
      return m;
    };
    std::vector<std::uint8_t> bytes(1 << 16);
    splitmix64 random(5);
    for (auto& b : bytes) b = static_cast<std::uint8_t>(random.next() % 96 + 32);
    const std::size_t ctx = parse_gpt_spec(s.gpt).context;
    const dataset text = text_windows(bytes, ctx, s.gpt_batch * 4, 3, "random bytes");
    gpt_tokens = s.gpt_batch * ctx;
    optimizer_config adamw = adam();
    adamw.kind = "adamw";
    adamw.weight_decay = 0.01f;
    {
      set_compute_threads(threads);
      std::vector<sequential> models;
      std::vector<std::unique_ptr<local_runner>> runners;
      for (dtype t : both) models.push_back(make_gpt(t));
      for (auto& m : models) runners.push_back(std::make_unique<local_runner>(m, adamw));
      std::uint64_t step[2] = {0, 0};
      for (int k = 0; k < 2; ++k) time_steps(*runners[k], text, s.gpt_batch, 2, step[k]);
      for (int r = 0; r < s.rounds; ++r)
        for (int k = 0; k < 2; ++k) gpt_single[k].push_back(time_steps(*runners[k], text, s.gpt_batch, s.steps, step[k]));
    }
    set_compute_threads(1);  // Note [idle teams]: as for the MLP's pipelines above
    std::uint64_t step[2] = {0, 0};
    for (int r = 0; r < s.rounds; ++r)
      for (int k = 0; k < 2; ++k) {
        pipeline_options o;
        o.stages = 2;
        o.microbatches = 4;
        o.schedule = "zb-h1";
        o.optimizer = adamw;
        o.compute_dtype = both[k];
        pipeline pipe(make_gpt(dtype::float32), o);
        time_steps(pipe, text, s.gpt_batch, r == 0 ? 2 : 1, step[k]);
        gpt_staged[k].push_back(time_steps(pipe, text, s.gpt_batch, s.steps, step[k]));
        gpt_peak[k] = pipe.last_peak_stash_bytes();
      }
  }

  const auto per_s = [&](const std::vector<double>& v) { return double(s.batch) / bench::median(v); };
  const auto mib = [](double b) { return b / (1024.0 * 1024.0); };
  nlohmann::json out;
  std::printf("\n%-44s %14s %14s %8s\n", "", "fp32", "bf16", "bf16/fp32");
  const auto row = [&](const char* what, double a, double b, const char* unit) {
    std::printf("%-44s %11.1f %-2s %11.1f %-2s %8.2f\n", what, a, unit, b, unit, a > 0 ? b / a : 0.0);
  };
  char label[96];
  std::snprintf(label, sizeof label, "single process (%d threads), samples/s", threads);
  row(label, per_s(single_s[0]), per_s(single_s[1]), "");
  row("single process peak activations, MiB", mib(single_bytes[0]), mib(single_bytes[1]), "");
  row("2 stages (1F1B, m=8), samples/s", per_s(staged[0].step_s), per_s(staged[1].step_s), "");
  for (std::size_t st = 0; st < staged[0].peak_bytes.size(); ++st) {
    std::snprintf(label, sizeof label, "  stage %zu peak stashed activations, MiB", st);
    row(label, mib(staged[0].peak_bytes[st]), mib(staged[1].peak_bytes[st]), "");
  }
  out["single_process"] = {{"threads", threads},
                           {"samples_per_s", {per_s(single_s[0]), per_s(single_s[1])}},
                           {"speedup", per_s(single_s[1]) / per_s(single_s[0])},
                           {"peak_activation_bytes", {single_bytes[0], single_bytes[1]}}};
  out["two_stages"] = {{"samples_per_s", {per_s(staged[0].step_s), per_s(staged[1].step_s)}},
                       {"speedup", per_s(staged[1].step_s) / per_s(staged[0].step_s)},
                       {"peak_stash_bytes", {staged[0].peak_bytes, staged[1].peak_bytes}}};
  if (s.nodes) {
    // Coordinator traffic (inputs, outputs, loss gradients) is float32 in both runs: the bf16 run's float32
    // bytes. The rest is between the stages.
    const double coordinator = noded[1].wire_bytes_per_step[0];
    const double between[2] = {noded[0].wire_bytes_per_step[0] - coordinator, noded[1].wire_bytes_per_step[1]};
    row("2 nodes (loopback), samples/s", per_s(noded[0].step_s), per_s(noded[1].step_s), "");
    row("bytes on the wire between stages, MiB/step", mib(between[0]), mib(between[1]), "");
    row("  coordinator <-> stages (float32), MiB/step", mib(coordinator), mib(coordinator), "");
    out["two_nodes"] = {{"samples_per_s", {per_s(noded[0].step_s), per_s(noded[1].step_s)}},
                        {"speedup", per_s(noded[1].step_s) / per_s(noded[0].step_s)},
                        {"wire_bytes_between_stages_per_step", {between[0], between[1]}},
                        {"wire_bytes_coordinator_per_step", coordinator}};
  }
  if (!s.gpt.empty()) {
    const auto tokens_s = [&](const std::vector<double>& v) { return double(gpt_tokens) / bench::median(v); };
    std::printf("%s, batch %zu:\n", s.gpt.c_str(), s.gpt_batch);
    std::snprintf(label, sizeof label, "  single process (%d threads), tokens/s", threads);
    row(label, tokens_s(gpt_single[0]), tokens_s(gpt_single[1]), "");
    row("  2 stages (ZB-H1, m=4), tokens/s", tokens_s(gpt_staged[0]), tokens_s(gpt_staged[1]), "");
    for (std::size_t st = 0; st < gpt_peak[0].size(); ++st) {
      std::snprintf(label, sizeof label, "  stage %zu peak stashed activations, MiB", st);
      row(label, mib(gpt_peak[0][st]), mib(gpt_peak[1][st]), "");
    }
    out["gpt"] = {{"model", s.gpt},
                  {"single_tokens_per_s", {tokens_s(gpt_single[0]), tokens_s(gpt_single[1])}},
                  {"single_speedup", tokens_s(gpt_single[1]) / tokens_s(gpt_single[0])},
                  {"two_stages_tokens_per_s", {tokens_s(gpt_staged[0]), tokens_s(gpt_staged[1])}},
                  {"two_stages_speedup", tokens_s(gpt_staged[1]) / tokens_s(gpt_staged[0])},
                  {"peak_stash_bytes", {gpt_peak[0], gpt_peak[1]}}};
  }
  out["model"] = s.model;
  out["batch"] = s.batch;
  out["load_average_after"] = bench::load_average();
  std::printf("load average after: %s\n", bench::load_average().c_str());
  std::cout << out.dump() << std::endl;
  return 0;
}

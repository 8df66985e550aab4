// bench_gpt: training throughput of a GPT (gpt:layers=4,dim=256,heads=8,context=128 by default) on the
// fortunes, batch 16 sequences, AdamW, fp32: one process on 1 thread and on every core, and 2 pipeline stages
// (1F1B and ZB-H1); beside it the bare GEMM speed on the shapes of the model's Linear layers, so the share of
// a step spent at GEMM speed is visible.
//
// FLOPs: a token's forward is L (24 D^2 + 4 T D) + 2 D V (QKV 6 D^2, output projection 2 D^2, MLP 16 D^2;
// scores and weighted values 2 T D each, over the full T x T since the mask is applied after the product;
// LM head), training three times that (forward, dx, dW): 20.9 MFLOP per token for the default model.
// Training GFLOPS = that * tokens/s. The bare GEMM figure runs, for one batch of B*T rows, the forward, dx
// and dW products of every Linear (ap::gemm, as the layers call it), on the same thread count.
//
// Note [timing under load] (bench_single_process.cpp): medians over steps; the load average is printed.
//
// Usage: bench_gpt [--model SPEC] [--batch N] [--steps N] [--warmup N] [--microbatches M] [--text PATH]
//                  [--only single|pipeline]
// Prints a table, then one JSON line.
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "actors/pipeline.hpp"
#include "bench/bench_support.hpp"
#include "data/text_corpus.hpp"
#include "model/gpt_spec.hpp"
#include "tensor/compute.hpp"
#include "tensor/matmul.hpp"
#include "training/trainer.hpp"

using namespace ap;

namespace {

using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

// CPU seconds of the calling thread: on one thread, a figure a loaded machine disturbs less than wall time
// (no time spent preempted; shared caches still slow it).
double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

struct step_time {
  double wall = 0.0, cpu = 0.0;  // medians
};

double forward_flops_per_token(const gpt_config& c) {
  const double d = double(c.dim), t = double(c.context);
  return double(c.layers) * (24.0 * d * d + 4.0 * t * d) + 2.0 * d * double(c.vocabulary);
}

// Median seconds per step over `steps` steps after `warmup`, on consecutive batches of one epoch order.
step_time median_step_s(step_runner& runner, const dataset& d, std::size_t batch_size, int warmup, int steps) {
  const auto order = epoch_order(d.size(), 1, 0);
  std::vector<double> times, cpu;
  for (int s = 0; s < warmup + steps; ++s) {
    const batch b = make_batch(d, order, std::size_t(s) % batch_count(d.size(), batch_size), batch_size);
    const double c0 = thread_cpu_seconds();
    const auto t0 = clock_type::now();
    runner.train_step(b.inputs, b.labels, std::uint64_t(s));
    if (s >= warmup) times.push_back(seconds_since(t0)), cpu.push_back(thread_cpu_seconds() - c0);
  }
  return {bench::median(times), bench::median(cpu)};
}

// GFLOPS of the Linear layers' products for one batch of `rows` rows: forward, dx, dW of each; and, where
// `by_product` is given, each kind's GFLOPS apart (y = x W, dx = dy W^T, dW += x^T dy; medians by wall clock).
step_time bare_gemm_gflops(const gpt_config& c, std::size_t rows, int repeats, double* by_product = nullptr) {
  struct shape { std::size_t in, out; };
  std::vector<shape> shapes;
  for (std::size_t l = 0; l < c.layers; ++l)
    for (const shape s : {shape{c.dim, 3 * c.dim}, shape{c.dim, c.dim}, shape{c.dim, 4 * c.dim}, shape{4 * c.dim, c.dim}})
      shapes.push_back(s);
  shapes.push_back({c.dim, c.vocabulary});
  std::size_t widest = 0;
  for (const shape& s : shapes) widest = std::max({widest, s.in, s.out});
  std::vector<float> x(rows * widest, 0.25f), y(rows * widest, 0.5f), w(widest * widest, 0.125f), dw(widest * widest, 0.0f);
  double flops = 0.0;
  for (const shape& s : shapes) flops += 3.0 * 2.0 * double(rows) * double(s.in) * double(s.out);
  std::vector<double> times, cpu, kinds[3];
  for (int r = 0; r < repeats + 1; ++r) {
    const double c0 = thread_cpu_seconds();
    const auto t0 = clock_type::now();
    double kind_s[3] = {0, 0, 0};
    for (const shape& s : shapes) {
      auto t = clock_type::now();
      gemm(false, false, rows, s.out, s.in, 1.0f, x.data(), w.data(), 0.0f, y.data());   // y = x W
      kind_s[0] += seconds_since(t), t = clock_type::now();
      gemm(false, true, rows, s.in, s.out, 1.0f, y.data(), w.data(), 0.0f, x.data());    // dx = dy W^T
      kind_s[1] += seconds_since(t), t = clock_type::now();
      gemm(true, false, s.in, s.out, rows, 1.0f, x.data(), y.data(), 1.0f, dw.data());   // dW += x^T dy
      kind_s[2] += seconds_since(t);
    }
    if (r > 0) {  // the first creates the primitives
      times.push_back(seconds_since(t0)), cpu.push_back(thread_cpu_seconds() - c0);
      for (int k = 0; k < 3; ++k) kinds[k].push_back(kind_s[k]);
    }
  }
  for (int k = 0; by_product && k < 3; ++k) by_product[k] = flops / 3.0 / bench::median(kinds[k]) * 1e-9;
  return {flops / bench::median(times) * 1e-9, flops / bench::median(cpu) * 1e-9};
}

struct row {
  std::string name;
  double tokens_per_s = 0.0, gflops = 0.0, bare_gflops = 0.0;
  double cpu_tokens_per_s = 0.0, cpu_gflops = 0.0, cpu_bare_gflops = 0.0;  // one thread only: by thread CPU time
};

}  // namespace

int main(int argc, char** argv) {
  std::string spec = "gpt:layers=4,dim=256,heads=8,context=128", text = default_text_path, only;
  std::size_t batch_size = 16;
  int steps = 10, warmup = 2, microbatches = 4;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--model") spec = next();
    else if (a == "--batch") batch_size = std::stoul(next());
    else if (a == "--steps") steps = std::stoi(next());
    else if (a == "--warmup") warmup = std::stoi(next());
    else if (a == "--microbatches") microbatches = std::stoi(next());
    else if (a == "--text") text = next();
    else if (a == "--only") only = next();
    else {
      std::fprintf(stderr, "usage: bench_gpt [--model SPEC] [--batch N] [--steps N] [--warmup N] [--microbatches M] "
                           "[--text PATH] [--only single|pipeline]\n");
      return 2;
    }
  }
  keep_tensor_memory();
  const gpt_config config = parse_gpt_spec(spec);
  const text_corpus corpus = load_text_corpus(text);
  check_corpus_fills(corpus, config.context);
  const dataset data = text_windows(corpus.train, config.context, 64 * batch_size, 1, "train");
  const double tokens_per_step = double(batch_size * config.context);
  const double train_flops_per_token = 3.0 * forward_flops_per_token(config);
  const std::size_t rows = batch_size * config.context;
  optimizer_config adamw;
  adamw.kind = "adamw";
  adamw.lr = 1e-3f;
  adamw.weight_decay = 0.01f;
  std::printf("bench_gpt: %s, batch %zu sequences (%zu tokens), AdamW, fp32, %d steps after %d warm-up; "
              "%.2f MFLOP per token trained; load %s\n",
              spec.c_str(), batch_size, rows, steps, warmup, train_flops_per_token * 1e-6, bench::load_average().c_str());
  std::vector<row> rows_out;
  const auto add = [&](const std::string& name, step_time step, step_time bare, bool one_thread) {
    row r{name, tokens_per_step / step.wall, tokens_per_step / step.wall * train_flops_per_token * 1e-9, bare.wall};
    std::printf("  %-34s %9.0f tokens/s  %6.1f GFLOPS  (bare GEMM %6.1f GFLOPS: %.2f)\n", r.name.c_str(), r.tokens_per_s,
                r.gflops, r.bare_gflops, r.bare_gflops > 0 ? r.gflops / r.bare_gflops : 0.0);
    if (one_thread) {
      r.cpu_tokens_per_s = tokens_per_step / step.cpu;
      r.cpu_gflops = r.cpu_tokens_per_s * train_flops_per_token * 1e-9;
      r.cpu_bare_gflops = bare.cpu;
      std::printf("  %-34s %9.0f tokens/s  %6.1f GFLOPS  (bare GEMM %6.1f GFLOPS: %.2f)\n", "  by thread CPU time",
                  r.cpu_tokens_per_s, r.cpu_gflops, r.cpu_bare_gflops, r.cpu_gflops / r.cpu_bare_gflops);
    }
    std::fflush(stdout);
    rows_out.push_back(r);
  };
  if (only.empty() || only == "single")
    for (const int threads : {1, single_process_threads()}) {
      set_compute_threads(threads);
      double by_product[3];
      const step_time bare = bare_gemm_gflops(config, rows, 3, by_product);
      std::printf("  bare GEMM on %d thread%s by product: y = x W %.1f, dx = dy W^T %.1f, dW += x^T dy %.1f GFLOPS\n",
                  threads, threads > 1 ? "s" : "", by_product[0], by_product[1], by_product[2]);
      sequential model = sequential::from_spec(spec);
      local_runner runner(model, adamw);
      add("one process, " + std::to_string(threads) + " thread" + (threads > 1 ? "s" : ""),
          median_step_s(runner, data, batch_size, warmup, steps), bare, threads == 1);
      if (single_process_threads() == 1) break;
    }
  if (only.empty() || only == "pipeline") {
    set_compute_threads(1);
    step_time bare = bare_gemm_gflops(config, rows / std::size_t(microbatches), 3);  // one microbatch, one thread
    bare.wall *= 2;  // two stages, two cores
    for (const std::string sched : {"1f1b", "zb-h1"}) {
      pipeline_options o;
      o.stages = 2;
      o.microbatches = microbatches;
      o.schedule = sched;
      o.optimizer = adamw;
      pipeline pipe(sequential::from_spec(spec), o);
      add("2 stages, m=" + std::to_string(microbatches) + ", " + sched + " (x2 cores)",
          median_step_s(pipe, data, batch_size, warmup, steps), bare, false);
    }
  }
  nlohmann::json out;
  out["model"] = spec;
  out["batch"] = batch_size;
  out["mflop_per_token"] = train_flops_per_token * 1e-6;
  out["load_after"] = bench::load_average();
  for (const row& r : rows_out)
    out["runs"].push_back({{"name", r.name}, {"tokens_per_s", r.tokens_per_s}, {"gflops", r.gflops},
                           {"bare_gemm_gflops", r.bare_gflops}, {"cpu_tokens_per_s", r.cpu_tokens_per_s},
                           {"cpu_gflops", r.cpu_gflops}, {"cpu_bare_gemm_gflops", r.cpu_bare_gflops}});
  std::printf("%s\n", out.dump().c_str());
  return 0;
}

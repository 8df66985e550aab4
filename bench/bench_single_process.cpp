// bench_single_process: single-process training throughput next to bare GEMM (the compute backend: oneDNN
// unless AP_COMPUTE=reference) on the same GEMM shapes.
//
// For each model it times, on one compute thread, (1) training steps over Fashion-MNIST
// (a step = make_batch + local_runner::train_step: zero_grad, forward, loss, backward, Adam) and (2) "bare"
// ap::gemm calls on exactly the GEMM shapes one training step performs (per Linear: forward y = x W,
// backward dW += x^T dy, dx = dy W^T except for the first layer, with the betas the layer uses).
// Training GFLOPS = GEMM flops per step / median step time, so ratio = training GFLOPS / bare GFLOPS is
// the share of a step's time spent inside GEMM.
//
// Note [timing under load]: the machine may be shared (2 vCPUs). Bare-GEMM repeats and training steps run
// in alternating blocks so both see the same load, and every figure is a median over repeats. The ratio is
// also given from thread CPU time (no time spent preempted) and from the fastest repeat of each; a
// neighbour still slows both sides through shared caches and memory bandwidth, hence the alternation.
// Under load, trust the cpu and min ratios over the wall one. The load average is printed before and after,
// and minor page faults per step show how much fresh memory a step touches.
//
// Usage: bench_single_process [--quick] [--heavy-steps N] [--model small|heavy] [--breakdown] [--data DIR]
//                             [--threads T]
//   --threads      compute threads (OpenMP, oneDNN) of the one process (default 1; the cpu columns then
//                  count only the calling thread)
//   --quick        40 steps of the small model instead of a full epoch, 8 of the heavy one instead of 40
//   --heavy-steps  timed steps of the heavy model
//   --model        run only that model (default: both)
//   --breakdown    also time each phase of a step of each model run (zero_grad, each layer's forward,
//                  backward_input and backward_weight next to the same GEMM alone, loss, Adam)
// Prints a human table, then one final JSON line.

#include <sys/resource.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/bench_support.hpp"
#include "data/dataset.hpp"
#include "data/fashion_mnist.hpp"
#include "model/layer.hpp"
#include "model/loss.hpp"
#include "model/optimizer.hpp"
#include "model/sequential.hpp"
#include "tensor/compute.hpp"
#include "tensor/matmul.hpp"
#include "training/trainer.hpp"

namespace {

using ap::bench::load_average;
using ap::bench::median;

using clock_type = std::chrono::steady_clock;

// Wall and thread-CPU seconds of one timed call, and the minor page faults it took (fresh memory).
struct sample {
  double wall = 0.0, cpu = 0.0;
  long faults = 0;
};

long minor_faults() {
  rusage ru{};
  getrusage(RUSAGE_THREAD, &ru);
  return ru.ru_minflt;
}

double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

sample time_call(const std::function<void()>& f) {
  const long f0 = minor_faults();
  const double c0 = thread_cpu_seconds();
  const auto w0 = clock_type::now();
  f();
  const auto w1 = clock_type::now();
  const double c1 = thread_cpu_seconds();
  return {std::chrono::duration<double>(w1 - w0).count(), c1 - c0, minor_faults() - f0};
}


// Medians over repeats; min_wall too, which only preemption-free repeats reach (Note [timing under load]).
struct medians {
  double wall = 0.0, cpu = 0.0, min_wall = 0.0, faults = 0.0;
};
medians median_of(const std::vector<sample>& s) {
  std::vector<double> w, c, f;
  for (const sample& x : s) w.push_back(x.wall), c.push_back(x.cpu), f.push_back(double(x.faults));
  return {median(w), median(c), w.empty() ? 0.0 : *std::min_element(w.begin(), w.end()), median(f)};
}


// ---------------------------------------------------------------------------------------------------
// The GEMMs of one training step, per Linear layer (in, out) and batch rows n.

struct linear_shape {
  std::size_t in, out;
};

std::vector<linear_shape> linear_shapes(const ap::sequential& model) {
  std::vector<linear_shape> shapes;
  for (std::size_t i = 0; i < model.size(); ++i) {
    const auto in = model.at(i).in_features(), out = model.at(i).out_features();
    if (in && out) shapes.push_back({*in, *out});
  }
  return shapes;
}

// forward 2 n in out, dW 2 n in out, dx 2 n in out for every layer but the first (need_input_grad false).
double gemm_flops_per_step(const std::vector<linear_shape>& shapes, std::size_t n) {
  double flops = 0.0;
  for (std::size_t l = 0; l < shapes.size(); ++l)
    flops += (l == 0 ? 2.0 : 3.0) * 2.0 * double(n) * double(shapes[l].in) * double(shapes[l].out);
  return flops;
}

// Operands shaped like the layer's own: x (n, in), W (in, out), y (n, out), dy (n, out), dW (in, out),
// dx (n, in). Values in [-0.5, 0.5) so nothing drifts into denormals.
struct bare_layer {
  linear_shape s;
  std::vector<float> x, w, y, dy, dw, dx;
};

std::vector<float> filled(std::size_t count, std::uint64_t seed) {
  std::vector<float> v(count);
  std::uint64_t state = seed * 0x9E3779B97F4A7C15ull + 1;
  for (float& f : v) {
    state ^= state << 13, state ^= state >> 7, state ^= state << 17;
    f = float(state >> 40) / float(1ull << 24) - 0.5f;
  }
  return v;
}

class bare_gemm_step {
 public:
  bare_gemm_step(const std::vector<linear_shape>& shapes, std::size_t n) : n_(n) {
    std::uint64_t seed = 1;
    for (const linear_shape& s : shapes)
      layers_.push_back({s, filled(n * s.in, seed++), filled(s.in * s.out, seed++), filled(n * s.out, seed++),
                         filled(n * s.out, seed++), filled(s.in * s.out, seed++), filled(n * s.in, seed++)});
  }
  // The same calls, in the same order, with the same betas as linear::forward / backward_* in train_step.
  void run() {
    for (bare_layer& l : layers_)
      ap::gemm(false, false, n_, l.s.out, l.s.in, 1.0f, l.x.data(), l.w.data(), 1.0f, l.y.data());
    for (std::size_t i = layers_.size(); i-- > 0;) {
      bare_layer& l = layers_[i];
      if (i > 0) ap::gemm(false, true, n_, l.s.in, l.s.out, 1.0f, l.dy.data(), l.w.data(), 0.0f, l.dx.data());
      ap::gemm(true, false, l.s.in, l.s.out, n_, 1.0f, l.x.data(), l.dy.data(), 1.0f, l.dw.data());
    }
  }

 private:
  std::size_t n_;
  std::vector<bare_layer> layers_;
};

// ---------------------------------------------------------------------------------------------------

struct model_case {
  std::string label, spec;
  std::size_t batch_size;
  std::size_t steps;       // 0: one full epoch
  std::size_t block;       // steps (and bare repeats) per alternating block, Note [timing under load]
  std::size_t warmup;      // untimed training steps and bare repeats first
};

struct model_result {
  std::string label, spec;
  std::size_t batch_size = 0, steps = 0, samples = 0, parameters = 0;
  bool full_epoch = false;
  double run_wall_s = 0.0;            // sum of timed (make_batch + train_step) calls
  double samples_per_s = 0.0;         // samples / run_wall_s
  double samples_per_s_median = 0.0;  // batch_size / median full-batch step time
  double gemm_gflop_per_step = 0.0;
  medians step, bare;                 // seconds per full-batch step / per bare GEMM set
  double mean_loss = 0.0;             // mean batch loss over the timed steps
  std::size_t bare_repeats = 0;
};

double gflops(double flop, double seconds) { return seconds > 0 ? flop / seconds * 1e-9 : 0.0; }

model_result run_case(const model_case& mc, const ap::dataset& data) {
  ap::sequential model = ap::sequential::from_spec(mc.spec);
  ap::optimizer_config adam;  // kind "adam", lr 1e-3
  ap::local_runner runner(model, adam);
  const auto shapes = linear_shapes(model);
  bare_gemm_step bare(shapes, mc.batch_size);

  model_result r;
  r.label = mc.label, r.spec = mc.spec, r.batch_size = mc.batch_size;
  r.parameters = model.parameter_count();
  r.gemm_gflop_per_step = gemm_flops_per_step(shapes, mc.batch_size) * 1e-9;

  const std::size_t batches = ap::batch_count(data.size(), mc.batch_size);
  r.full_epoch = mc.steps == 0 || mc.steps >= batches;
  const std::size_t steps = r.full_epoch ? batches : mc.steps;

  // Warm-up on batches of another epoch order: page in the weights, the optimizer state and BLAS buffers.
  const auto warm_order = ap::epoch_order(data.size(), 1, 999);
  for (std::size_t s = 0; s < mc.warmup; ++s) {
    const ap::batch b = ap::make_batch(data, warm_order, s % batches, mc.batch_size);
    runner.train_step(b.inputs, b.labels, s);
    bare.run();
  }

  const auto order = ap::epoch_order(data.size(), 1, 0);
  std::vector<sample> step_times, bare_times;
  double loss_sum = 0.0;
  for (std::size_t s = 0; s < steps;) {
    for (std::size_t k = 0; k < mc.block; ++k) bare_times.push_back(time_call([&] { bare.run(); }));
    for (std::size_t k = 0; k < mc.block && s < steps; ++k, ++s) {
      ap::batch b;
      float loss = 0.0f;
      const sample t = time_call([&] {
        b = ap::make_batch(data, order, s, mc.batch_size);
        loss = runner.train_step(b.inputs, b.labels, mc.warmup + s);
      });
      r.run_wall_s += t.wall;
      r.samples += ap::rows(b.inputs);
      loss_sum += loss;
      if (ap::rows(b.inputs) == mc.batch_size) step_times.push_back(t);  // the last one may be partial
    }
  }
  r.steps = steps;
  r.mean_loss = loss_sum / double(steps);
  r.step = median_of(step_times);
  r.bare = median_of(bare_times);
  r.bare_repeats = bare_times.size();
  r.samples_per_s = r.run_wall_s > 0 ? double(r.samples) / r.run_wall_s : 0.0;
  r.samples_per_s_median = r.step.wall > 0 ? double(mc.batch_size) / r.step.wall : 0.0;
  return r;
}

// ---------------------------------------------------------------------------------------------------
// --breakdown: one train_step taken apart (the same calls local_runner makes), each phase timed.

void print_breakdown(const std::string& spec, std::size_t batch_size, std::size_t repeats, const ap::dataset& data) {
  ap::sequential model = ap::sequential::from_spec(spec);
  auto opt = ap::make_optimizer(ap::optimizer_config{});
  auto loss = ap::make_loss("cross_entropy");
  const auto order = ap::epoch_order(data.size(), 1, 0);
  std::map<std::string, std::vector<double>> phases, bare_phases;  // wall seconds per phase
  std::vector<std::string> names;
  auto timed = [&](const std::string& name, const std::function<void()>& f) {
    if (!phases.count(name)) names.push_back(name);
    phases[name].push_back(time_call(f).wall);
  };
  // The bare GEMM of each Linear phase, on operands of its shapes, run right after the step.
  std::map<std::size_t, bare_layer> bare;  // by layer index
  std::uint64_t seed = 1;
  for (std::size_t i = 0; i < model.size(); ++i) {
    const auto in = model.at(i).in_features(), out = model.at(i).out_features();
    if (!in || !out) continue;
    const std::size_t n = batch_size;
    bare[i] = {{*in, *out}, filled(n * *in, seed++), filled(*in * *out, seed++), filled(n * *out, seed++),
               filled(n * *out, seed++), filled(*in * *out, seed++), filled(n * *in, seed++)};
  }
  for (std::size_t rep = 0; rep < repeats + 1; ++rep) {
    const ap::batch b = ap::make_batch(data, order, rep, batch_size);
    timed("zero_grad", [&] { model.zero_grad(); });
    ap::sequential_cache cache;
    cache.layers.resize(model.size());
    ap::tensor h = b.inputs;
    const ap::forward_context ctx{true, rep, 0};
    for (std::size_t i = 0; i < model.size(); ++i)
      timed("F " + std::to_string(i) + " " + model.at(i).describe(),
            [&] { h = model.at(i).forward(h, cache.layers[i], ctx); });
    ap::tensor d;
    timed("loss + gradient", [&] {
      loss->compute_loss(h, b.labels);
      d = loss->compute_gradient(h, b.labels);
    });
    for (std::size_t i = model.size(); i-- > 0;) {
      const std::string name = std::to_string(i) + " " + model.at(i).describe();
      ap::tensor dx;
      if (i > 0) timed("Bi " + name, [&] { model.at(i).backward_input(d, cache.layers[i], &dx); });
      timed("Bw " + name, [&] { model.at(i).backward_weight(d, cache.layers[i]); });
      d = std::move(dx);
    }
    timed("cache free", [&] { cache = ap::sequential_cache{}; });
    timed("optimizer (adam)", [&] { opt->step(model.parameters()); });
    for (auto& [i, l] : bare) {
      const std::size_t n = batch_size;
      const std::string name = std::to_string(i) + " " + model.at(i).describe();
      bare_phases["F " + name].push_back(time_call([&] {
        ap::gemm(false, false, n, l.s.out, l.s.in, 1.0f, l.x.data(), l.w.data(), 1.0f, l.y.data());
      }).wall);
      if (i > 0)
        bare_phases["Bi " + name].push_back(time_call([&] {
          ap::gemm(false, true, n, l.s.in, l.s.out, 1.0f, l.dy.data(), l.w.data(), 0.0f, l.dx.data());
        }).wall);
      bare_phases["Bw " + name].push_back(time_call([&] {
        ap::gemm(true, false, l.s.in, l.s.out, n, 1.0f, l.x.data(), l.dy.data(), 1.0f, l.dw.data());
      }).wall);
    }
  }
  double total = 0.0, total_bare = 0.0;
  for (auto* m : {&phases, &bare_phases})
    for (auto& [name, v] : *m) v.erase(v.begin());  // the first repeat warms up
  for (const auto& n : names) total += median(phases[n]);
  std::printf("\nbreakdown of one %s step (batch %zu), median of %zu, wall ms; bare = the same GEMM alone:\n",
              spec.c_str(), batch_size, repeats);
  std::printf("  %-34s %9s %6s %9s %9s\n", "phase", "ms", "share", "bare ms", "outside");
  for (const auto& n : names) {
    const double m = median(phases[n]);
    if (bare_phases.count(n)) {
      const double g = median(bare_phases[n]);
      total_bare += g;
      std::printf("  %-34s %9.3f %5.1f%% %9.3f %9.3f\n", n.c_str(), m * 1e3, 100.0 * m / total, g * 1e3,
                  (m - g) * 1e3);
    } else {
      std::printf("  %-34s %9.3f %5.1f%% %9s %9.3f\n", n.c_str(), m * 1e3, 100.0 * m / total, "", m * 1e3);
    }
  }
  std::printf("  %-34s %9.3f %6s %9.3f %9.3f\n", "sum of medians", total * 1e3, "", total_bare * 1e3,
              (total - total_bare) * 1e3);
}

// ---------------------------------------------------------------------------------------------------

void print_table(const std::vector<model_result>& results) {
  std::printf("\n%-8s %-22s %6s %6s %10s %10s %9s %9s %9s %7s %7s\n", "model", "spec", "batch", "steps",
              "samples/s", "(median)", "step ms", "bare ms", "GF/step", "train", "bare");
  std::printf("%-8s %-22s %6s %6s %10s %10s %9s %9s %9s %7s %7s\n", "", "", "", "", "(run)", "", "", "", "",
              "GFLOPS", "GFLOPS");
  for (const auto& r : results)
    std::printf("%-8s %-22s %6zu %6zu %10.0f %10.0f %9.2f %9.2f %9.3f %7.1f %7.1f\n", r.label.c_str(),
                r.spec.c_str(), r.batch_size, r.steps, r.samples_per_s, r.samples_per_s_median, r.step.wall * 1e3,
                r.bare.wall * 1e3, r.gemm_gflop_per_step, gflops(r.gemm_gflop_per_step * 1e9, r.step.wall),
                gflops(r.gemm_gflop_per_step * 1e9, r.bare.wall));
  std::printf("\nratio = training GFLOPS / bare GEMM GFLOPS = bare time / step time, from medians of wall time,\n"
              "of thread CPU time, and from the fastest repeat of each (the last two resist a loaded machine)\n");
  std::printf("%-8s %8s %8s %8s %10s %10s %12s\n", "model", "wall", "cpu", "min", "step cpu", "bare cpu",
              "faults/step");
  for (const auto& r : results)
    std::printf("%-8s %8.3f %8.3f %8.3f %8.2fms %8.2fms %12.0f   mean loss %.4f%s\n", r.label.c_str(),
                r.bare.wall / r.step.wall, r.bare.cpu / r.step.cpu, r.bare.min_wall / r.step.min_wall,
                r.step.cpu * 1e3, r.bare.cpu * 1e3, r.step.faults, r.mean_loss,
                r.full_epoch ? " (one full epoch)" : "");
}

nlohmann::json to_json(const model_result& r) {
  return {{"model", r.label},
          {"spec", r.spec},
          {"batch_size", r.batch_size},
          {"steps", r.steps},
          {"full_epoch", r.full_epoch},
          {"parameters", r.parameters},
          {"samples", r.samples},
          {"wall_s", r.run_wall_s},
          {"samples_per_s", r.samples_per_s},
          {"samples_per_s_median_step", r.samples_per_s_median},
          {"step_ms", r.step.wall * 1e3},
          {"step_cpu_ms", r.step.cpu * 1e3},
          {"bare_gemm_ms", r.bare.wall * 1e3},
          {"bare_gemm_cpu_ms", r.bare.cpu * 1e3},
          {"bare_repeats", r.bare_repeats},
          {"gemm_gflop_per_step", r.gemm_gflop_per_step},
          {"train_gflops", gflops(r.gemm_gflop_per_step * 1e9, r.step.wall)},
          {"bare_gflops", gflops(r.gemm_gflop_per_step * 1e9, r.bare.wall)},
          {"ratio", r.bare.wall / r.step.wall},
          {"ratio_cpu", r.bare.cpu / r.step.cpu},
          {"ratio_min", r.bare.min_wall / r.step.min_wall},
          {"step_min_ms", r.step.min_wall * 1e3},
          {"bare_gemm_min_ms", r.bare.min_wall * 1e3},
          {"page_faults_per_step", r.step.faults},
          {"mean_loss", r.mean_loss}};
}

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr,
               "%s\nusage: bench_single_process [--quick] [--heavy-steps N] [--model small|heavy] [--breakdown]"
               " [--data DIR] [--threads T]\n",
               why);
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  ap::keep_tensor_memory();
  bool quick = false, breakdown = false;
  std::size_t heavy_steps = 0;  // 0: 40, or 8 with --quick
  std::string dir = ap::default_fashion_mnist_dir, only;
  int threads = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--quick") quick = true;
    else if (a == "--breakdown") breakdown = true;
    else if (a == "--heavy-steps" && i + 1 < argc) {
      heavy_steps = std::strtoul(argv[++i], nullptr, 10);
      if (heavy_steps == 0) usage("--heavy-steps needs a positive number");
    }
    else if (a == "--data" && i + 1 < argc) dir = argv[++i];
    else if (a == "--threads" && i + 1 < argc) {
      threads = std::atoi(argv[++i]);
      if (threads < 1) usage("--threads needs a positive number");
    }
    else if (a == "--model" && i + 1 < argc) only = argv[++i];
    else usage(("unknown or incomplete option '" + a + "'").c_str());
  }
  if (!only.empty() && only != "small" && only != "heavy") usage("--model takes small or heavy");
  if (heavy_steps == 0) heavy_steps = quick ? 8 : 40;

  ap::set_compute_threads(threads);
  const std::string load_before = load_average();
  ap::dataset train_set;
  try {
    train_set = ap::load_fashion_mnist("train", dir);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cannot load Fashion-MNIST: %s\n", e.what());
    return 1;
  }
  std::printf("single-process training, compute backend %s, %d thread(s), Adam; load average before: %s\n",
              ap::compute_backend_name(ap::current_compute_backend()).c_str(), threads, load_before.c_str());

  const std::vector<model_case> cases = {
      {"small", "784-512-256-10", 256, quick ? std::size_t(40) : 0, 10, 5},
      {"heavy", "784-2048-2048-2048-10", 256, heavy_steps, 1, 2},
  };
  std::vector<model_result> results;
  for (const model_case& mc : cases) {
    if (!only.empty() && mc.label != only) continue;
    std::printf("running %s %s ...\n", mc.label.c_str(), mc.spec.c_str());
    std::fflush(stdout);
    results.push_back(run_case(mc, train_set));
  }
  const std::string load_after = load_average();
  print_table(results);
  std::printf("load average after: %s (2 vCPUs: above ~1 means another process competed for the cores)\n",
              load_after.c_str());
  if (breakdown)
    for (const model_case& mc : cases)
      if (only.empty() || mc.label == only) print_breakdown(mc.spec, mc.batch_size, quick ? 3 : 9, train_set);

  nlohmann::json j = {{"bench", "single_process"}, {"compute_backend", ap::compute_backend_name(ap::current_compute_backend())},
                      {"compute_threads", threads},
                      {"quick", quick},
                      {"load_before", load_before},
                      {"load_after", load_after}};
  for (const auto& r : results) j["models"].push_back(to_json(r));
  std::printf("%s\n", j.dump().c_str());
  return 0;
}

// bench_memory: resident memory of a long pipeline run (soak) and of training on a mapped token file (tokens).
//
// Usage: bench_memory [soak|tokens] [OPTIONS]   (--help lists each mode's options)
#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "actors/pipeline.hpp"
#include "bench/bench_support.hpp"
#include "data/open_data.hpp"
#include "data/synthetic.hpp"
#include "tensor/compute.hpp"
#include "training/trainer.hpp"

using namespace ap;
namespace fs = std::filesystem;

namespace {

// ---- soak: does a long pipeline run stay flat in memory?
// Trains a 4-stage 1F1B pipeline, printing VmRSS, malloc's bytes and the events held every --every steps, then
// the slope in bytes per step after warm-up (Note [bounded event log]).
namespace soak {

double slope(const std::vector<double>& x, const std::vector<double>& y) {
  const double n = static_cast<double>(x.size());
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (std::size_t i = 0; i < x.size(); ++i) sx += x[i], sy += y[i], sxx += x[i] * x[i], sxy += x[i] * y[i];
  const double d = n * sxx - sx * sx;
  return d == 0 ? 0.0 : (n * sxy - sx * sy) / d;
}

int run(bench::arguments& args) {
  const long steps = args.integer("--steps", 100000, 1), batch_size = args.integer("--batch", 64, 1);
  long every = args.integer("--every", 0);
  const std::string model_spec = args.text("--model", "64-256-256-128-10");
  const bool record = args.flag("--record-events"), keep_memory = !args.flag("--no-keep-memory");
  args.done();
  if (every <= 0) every = std::max(1L, steps / 20);
  if (keep_memory) keep_tensor_memory();  // as `actorpipe` does
  set_compute_threads(1);
  const sequential model = sequential::from_spec(model_spec);
  const std::size_t features = std::stoul(model_spec.substr(0, model_spec.find('-')));
  const std::size_t classes = std::stoul(model_spec.substr(model_spec.rfind('-') + 1));
  const dataset data = make_blobs(4096, features, classes, 7);
  const auto order = epoch_order(data.size(), 1, 0);
  const std::size_t batches = batch_count(data.size(), static_cast<std::size_t>(batch_size));

  pipeline_options o;
  o.stages = 4;
  o.microbatches = 8;
  o.schedule = "1f1b";
  o.record_events = record;
  pipeline pipe(model, o);
  std::printf("bench_memory soak: 4 stages, 1f1b, 8 microbatches, model %s, batch %ld, %ld steps%s; load %s\n",
              model_spec.c_str(), batch_size, steps, record ? ", events kept (--record-events)" : "",
              bench::load_average().c_str());
  std::printf("%10s %12s %12s %12s %12s\n", "step", "VmRSS kB", "heap used kB", "heap kB", "held events");
  const long warmup = std::max(every, steps / 10);  // allocator pools, mailboxes and caches settle first
  std::vector<double> xs, ys;
  float loss = 0.0f;
  for (long s = 1; s <= steps; ++s) {
    const batch b = make_batch(data, order, static_cast<std::size_t>(s) % batches, static_cast<std::size_t>(batch_size));
    loss = pipe.train_step(b.inputs, b.labels, static_cast<std::uint64_t>(s));
    if (s % every == 0 || s == steps) {
      const long kb = bench::status_kib("VmRSS");
      const struct mallinfo2 mi = mallinfo2();  // in use, and taken from the system
      std::printf("%10ld %12ld %12zu %12zu %12zu\n", s, kb, mi.uordblks / 1024, (mi.arena + mi.hblkhd) / 1024,
                  pipe.held_events());
      std::fflush(stdout);
      if (s >= warmup) xs.push_back(static_cast<double>(s)), ys.push_back(static_cast<double>(kb) * 1024.0);
    }
  }
  const double bytes_per_step = xs.size() >= 2 ? slope(xs, ys) : 0.0;
  std::printf("slope after step %ld: %.1f bytes per step\n", warmup, bytes_per_step);
  std::printf("%s\n", nlohmann::json{{"bench", "bench_memory soak"}, {"steps", steps}, {"model", model_spec},
                                     {"record_events", record}, {"final_rss_kb", bench::status_kib("VmRSS")},
                                     {"bytes_per_step", bytes_per_step}, {"final_loss", loss}}.dump().c_str());
  return 0;
}

}  // namespace soak

// ---- tokens: the resident memory of training on a memory-mapped token file does not grow with the file
// Trains a tiny GPT on a small and a big uint16 token file, printing VmRSS and VmHWM before and after each.
namespace tokens {

double status_mib(const char* field) { return static_cast<double>(bench::status_kib(field)) / 1024.0; }

void write_tokens(const std::string& path, std::size_t mib) {
  std::ofstream out(path, std::ios::binary);
  std::vector<std::uint16_t> chunk(std::size_t{1} << 20);  // 2 MiB
  std::uint64_t x = 1;
  for (std::size_t written = 0; written < mib * (std::size_t{1} << 20); written += chunk.size() * 2) {
    for (auto& t : chunk) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      t = std::uint16_t((x >> 33) % 256);
    }
    out.write(reinterpret_cast<const char*>(chunk.data()), std::streamsize(chunk.size() * 2));
  }
  if (!out) throw std::runtime_error("cannot write " + path);
}

nlohmann::json train_on(const std::string& path, const std::string& model_spec, std::size_t steps, std::size_t batch_size) {
  const double rss0 = status_mib("VmRSS"), hwm0 = status_mib("VmHWM");
  const auto t0 = bench::clock_type::now();
  sequential model = sequential::from_spec(model_spec, sequential_options{"relu", 1});
  data_config c;
  c.path = path;
  c.format = "tokens";
  c.validation_fraction = 0.01;
  const data_sets data = open_data(c, 64, 256, 1, 16);
  const double rss_open = status_mib("VmRSS");
  const double open_s = bench::seconds_since(t0);
  optimizer_config o;
  o.kind = "adam";
  o.lr = 1e-3f;
  local_runner runner(model, o);
  train_config config;
  config.batch_size = batch_size;
  config.max_steps = steps;
  const train_report r = train(runner, *data.train, nullptr, config);
  const double val = evaluate_loss(runner, *data.validation, batch_size);
  const double size_mib = double(fs::file_size(path)) / (1 << 20);
  std::printf("%-44s %8.0f MiB  %12zu windows  open+check %5.1f s  VmRSS %6.1f -> %6.1f (opened) -> %6.1f MiB "
              "(trained)  VmHWM %6.1f -> %6.1f MiB  %zu steps, last loss %.3f, validation loss %.3f\n",
              path.c_str(), size_mib, data.train->size(), open_s, rss0, rss_open, status_mib("VmRSS"), hwm0,
              status_mib("VmHWM"), r.steps, r.last_loss, val);
  std::fflush(stdout);
  return {{"file_mib", size_mib}, {"open_s", open_s}, {"rss_mib", {rss0, rss_open, status_mib("VmRSS")}},
          {"hwm_mib", {hwm0, status_mib("VmHWM")}}, {"last_loss", r.last_loss}, {"validation_loss", val}};
}

int run(bench::arguments& args) {
  const std::string dir = args.text("--dir", fs::temp_directory_path().string());
  std::string small = args.text("--small", ""), big = args.text("--big", "");
  const std::string model = args.text("--model", "gpt:layers=1,dim=32,heads=2,context=64");
  const auto small_mb = static_cast<std::size_t>(args.integer("--small-mb", 256, 1));
  const auto big_mb = static_cast<std::size_t>(args.integer("--big-mb", 2048, 1));
  const auto steps = static_cast<std::size_t>(args.integer("--steps", 50, 1));
  const auto batch = static_cast<std::size_t>(args.integer("--batch", 16, 1));
  args.done();
  std::vector<std::string> written;
  const auto make = [&](std::string& path, std::size_t mib, const char* name) {
    if (!path.empty()) return;
    path = (fs::path(dir) / ("bench_memory_tokens_" + std::to_string(::getpid()) + "_" + name + ".bin")).string();
    written.push_back(path);
    write_tokens(path, mib);
  };
  nlohmann::json out = {{"bench", "bench_memory tokens"}, {"model", model}, {"steps", steps}, {"batch", batch}};
  try {
    make(small, small_mb, "small");
    make(big, big_mb, "big");
    std::printf("bench_memory tokens: model %s, batch %zu, context 64, %zu steps; VmRSS/VmHWM at start %.1f/%.1f MiB\n",
                model.c_str(), batch, steps, status_mib("VmRSS"), status_mib("VmHWM"));
    out["small"] = train_on(small, model, steps, batch);
    out["big"] = train_on(big, model, steps, batch);
  } catch (...) {
    for (const auto& p : written) fs::remove(p);
    throw;
  }
  for (const auto& p : written) fs::remove(p);
  std::printf("%s\n", out.dump().c_str());
  return 0;
}

}  // namespace tokens

}  // namespace

int main(int argc, char** argv) {
  return bench::run_mode(
      argc, argv, "bench_memory",
      {{"soak", "[--steps N] [--every K] [--model SPEC] [--batch N] [--record-events] [--no-keep-memory]",
        "a long 4-stage run's resident memory and its slope per step", soak::run},
       {"tokens", "[--dir PATH] [--small-mb N] [--big-mb N] [--small FILE] [--big FILE] [--steps N] [--batch N] [--model SPEC]",
        "training on a small and a big memory-mapped token file: resident memory before and after", tokens::run}});
}

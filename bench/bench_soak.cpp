// Soak: does a long pipeline run stay flat in memory? Trains a 4-stage 1F1B pipeline (8 microbatches) on
// synthetic blobs for many steps and prints this process's resident memory (VmRSS, /proc/self/status) at
// intervals, then the slope in bytes per step after warm-up (least squares over the samples after it).
// Target: well under 1 KB per step (Note [bounded event log] in stage/event_log.hpp). Run on demand:
//   bench_soak [--steps N (100000)] [--every K (steps/20)] [--model 64-256-256-128-10] [--batch 64]
//              [--record-events]   (keeps every event, as `train` did before: shows the old growth)
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <malloc.h>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "actors/pipeline.hpp"
#include "data/synthetic.hpp"
#include "tensor/compute.hpp"

using namespace ap;

namespace {

long rss_kb() {  // VmRSS of this process, in kB; -1 if unreadable
  std::ifstream f("/proc/self/status");
  std::string key;
  while (f >> key) {
    if (key == "VmRSS:") {
      long kb = -1;
      f >> kb;
      return kb;
    }
    std::getline(f, key);
  }
  return -1;
}

// Least-squares slope of y over x.
double slope(const std::vector<double>& x, const std::vector<double>& y) {
  const double n = static_cast<double>(x.size());
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (std::size_t i = 0; i < x.size(); ++i) sx += x[i], sy += y[i], sxx += x[i] * x[i], sxy += x[i] * y[i];
  const double d = n * sxx - sx * sx;
  return d == 0 ? 0.0 : (n * sxy - sx * sy) / d;
}

}  // namespace

int main(int argc, char** argv) {
  long steps = 100000, every = 0, batch_size = 64;
  std::string model_spec = "64-256-256-128-10";
  bool record = false, keep_memory = true;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "--steps" && has_value) steps = std::atol(argv[++i]);
    else if (a == "--every" && has_value) every = std::atol(argv[++i]);
    else if (a == "--batch" && has_value) batch_size = std::atol(argv[++i]);
    else if (a == "--model" && has_value) model_spec = argv[++i];
    else if (a == "--record-events") record = true;
    else if (a == "--no-keep-memory") keep_memory = false;
    else {
      std::fprintf(stderr, "bench_soak: unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  if (steps <= 0 || batch_size <= 0) {
    std::fprintf(stderr, "bench_soak: --steps and --batch must be positive\n");
    return 2;
  }
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
  std::printf("soak: 4 stages, 1f1b, 8 microbatches, model %s, batch %ld, %ld steps%s\n", model_spec.c_str(),
              batch_size, steps, record ? ", events kept (--record-events)" : "");
  std::printf("%10s %12s %12s %12s %12s\n", "step", "VmRSS kB", "heap used kB", "heap kB", "held events");
  const long warmup = std::max(every, steps / 10);  // allocator pools, CAF mailboxes and caches settle first
  std::vector<double> xs, ys;
  float loss = 0.0f;
  for (long s = 1; s <= steps; ++s) {
    const batch b = make_batch(data, order, static_cast<std::size_t>(s) % batches, static_cast<std::size_t>(batch_size));
    loss = pipe.train_step(b.inputs, b.labels, static_cast<std::uint64_t>(s));
    if (s % every == 0 || s == steps) {
      const long kb = rss_kb();
      const struct mallinfo2 mi = mallinfo2();  // main arena and the others: in use, and taken from the system
      std::printf("%10ld %12ld %12zu %12zu %12zu\n", s, kb, mi.uordblks / 1024, (mi.arena + mi.hblkhd) / 1024,
                  pipe.held_events());
      std::fflush(stdout);
      if (s >= warmup) xs.push_back(static_cast<double>(s)), ys.push_back(static_cast<double>(kb) * 1024.0);
    }
  }
  const double bytes_per_step = xs.size() >= 2 ? slope(xs, ys) : 0.0;
  std::printf("slope after step %ld: %.1f bytes per step (target: well under 1024)\n", warmup, bytes_per_step);
  std::printf("%s\n", nlohmann::json{{"steps", steps}, {"model", model_spec}, {"record_events", record},
                                     {"final_rss_kb", rss_kb()}, {"bytes_per_step", bytes_per_step},
                                     {"final_loss", loss}}.dump().c_str());
  return 0;
}

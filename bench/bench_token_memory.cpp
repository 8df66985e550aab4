// bench_token_memory: the resident memory of training on a memory-mapped token file does not grow with the
// file. Writes a raw uint16 token file of --small-mb and one of --big-mb (or reads --small/--big files given),
// opens each through open_data (the token id check reads with pread), trains a tiny GPT for --steps steps
// with local_runner, and prints VmRSS and VmHWM (from /proc/self/status) before and after each.
//
// Usage: bench_token_memory [--dir PATH] [--small-mb N] [--big-mb N] [--small FILE] [--big FILE] [--steps N]
//                           [--batch N] [--model SPEC]
// Files it writes are removed at the end.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "data/open_data.hpp"
#include "training/trainer.hpp"

using namespace ap;
namespace fs = std::filesystem;

namespace {

// A field of /proc/self/status in MiB ("VmRSS", "VmHWM").
double status_mib(const char* field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(std::string(field) + ":", 0) == 0) return std::strtod(line.c_str() + std::strlen(field) + 1, nullptr) / 1024.0;
  return -1;
}

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

void run(const std::string& path, const std::string& model_spec, std::size_t steps, std::size_t batch_size) {
  const double rss0 = status_mib("VmRSS"), hwm0 = status_mib("VmHWM");
  const auto t0 = std::chrono::steady_clock::now();
  sequential model = sequential::from_spec(model_spec, sequential_options{"relu", 1});
  data_config c;
  c.path = path;
  c.format = "tokens";
  c.validation_fraction = 0.01;
  const data_sets data = open_data(c, 64, 256, 1, 16);
  const double rss_open = status_mib("VmRSS");
  const double open_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  optimizer_config o;
  o.kind = "adam";
  o.lr = 1e-3f;
  local_runner runner(model, o);
  train_config config;
  config.batch_size = batch_size;
  config.max_steps = steps;
  const train_report r = train(runner, *data.train, nullptr, config);
  const double val = evaluate_loss(runner, *data.validation, batch_size);
  std::printf("%-44s %8.0f MiB  %12zu windows  open+check %5.1f s  VmRSS %6.1f -> %6.1f (opened) -> %6.1f MiB "
              "(trained)  VmHWM %6.1f -> %6.1f MiB  %zu steps, last loss %.3f, validation loss %.3f\n",
              path.c_str(), double(fs::file_size(path)) / (1 << 20), data.train->size(), open_s, rss0, rss_open,
              status_mib("VmRSS"), hwm0, status_mib("VmHWM"), r.steps, r.last_loss, val);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir = fs::temp_directory_path().string(), small, big, model = "gpt:layers=1,dim=32,heads=2,context=64";
  std::size_t small_mb = 256, big_mb = 2048, steps = 50, batch = 16;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--dir") dir = v;
    else if (k == "--small") small = v;
    else if (k == "--big") big = v;
    else if (k == "--small-mb") small_mb = std::stoul(v);
    else if (k == "--big-mb") big_mb = std::stoul(v);
    else if (k == "--steps") steps = std::stoul(v);
    else if (k == "--batch") batch = std::stoul(v);
    else if (k == "--model") model = v;
    else { std::fprintf(stderr, "unknown option %s\n", k.c_str()); return 2; }
  }
  std::vector<std::string> written;
  const auto make = [&](std::string& path, std::size_t mib, const char* name) {
    if (!path.empty()) return;
    path = (fs::path(dir) / ("bench_token_memory_" + std::to_string(::getpid()) + "_" + name + ".bin")).string();
    written.push_back(path);
    write_tokens(path, mib);
  };
  int rc = 0;
  try {
    make(small, small_mb, "small");
    make(big, big_mb, "big");
    std::printf("model %s, batch %zu, context 64, %zu steps; VmRSS/VmHWM at start %.1f/%.1f MiB\n", model.c_str(),
                batch, steps, status_mib("VmRSS"), status_mib("VmHWM"));
    run(small, model, steps, batch);
    run(big, model, steps, batch);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_token_memory: %s\n", e.what());
    rc = 1;
  }
  for (const auto& p : written) fs::remove(p);
  return rc;
}

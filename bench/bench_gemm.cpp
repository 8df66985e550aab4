// bench_gemm: few-row GEMMs (pipeline microbatches) on OpenBLAS vs the AVX-512 kernels of tensor/small_gemm.
//
// Shapes are the two products a Linear layer computes with the microbatch as the rows:
//   nn  C (M, N) = A (M, K) * B (K, N)            forward y = x W
//   nt  C (M, N) = A (M, K) * B^T, B stored (N, K) backward dx = dy W^T
// For M in {8, 16, 32, 64, 128, 256} and (K, N) in {(2048, 2048), (784, 2048), (2048, 784)}, OpenBLAS pinned
// to one thread. Each repeat times OpenBLAS (cblas_sgemm via ap::gemm_blas), the small kernel
// (ap::small_gemm_nn/nt) and ap::gemm (whichever it dispatches to) back to back, so all three see the same
// machine load; figures are GFLOPS of the median repeat by wall clock (the best repeat is in the JSON too),
// and by thread CPU time (the "cpu" columns: time the thread was preempted by other work does not count,
// though a neighbour still competes for caches and memory bandwidth). B is warm (in
// L3 after the first call), as it is for a stage that runs microbatch after microbatch on the same weight.
// The load average is printed before and after: the machine may be shared.
//
// Usage: bench_gemm [--repeats R] [--quick]   (--quick: M in {8, 32, 128}, K = N = 2048 only, 5 repeats)
// Prints a table, then one JSON line.
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tensor/matmul.hpp"
#include "tensor/small_gemm.hpp"

namespace {

std::string load_average() {
  std::ifstream in("/proc/loadavg");
  std::string a, b, c;
  in >> a >> b >> c;
  return a + " " + b + " " + c;
}

double seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void fill(std::vector<float>& v, unsigned seed) {
  unsigned x = seed * 2654435761u + 1u;
  for (float& f : v) {
    x = x * 1664525u + 1013904223u;
    f = static_cast<float>(x >> 8) / 16777216.0f - 0.5f;
  }
}

double cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

int main(int argc, char** argv) {
  int repeats = 11;
  bool quick = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--repeats") && i + 1 < argc) {
      repeats = std::max(1, std::atoi(argv[++i]));
    } else if (!std::strcmp(argv[i], "--quick")) {
      quick = true;
      repeats = 5;
    } else {
      std::fprintf(stderr, "usage: %s [--repeats R] [--quick]\n", argv[0]);
      return 2;
    }
  }
  ap::set_blas_threads(1);
  const std::string load_before = load_average();
  std::printf("bench_gemm: OpenBLAS (1 thread) vs AVX-512 small-M kernels (%s), median of %d repeats\n",
              ap::small_gemm_compiled() ? "compiled in" : "NOT compiled: both columns are OpenBLAS", repeats);
  std::printf("load average before: %s\n\n", load_before.c_str());
  std::printf("%-5s %5s %5s %5s | %9s %9s %9s | %7s | %9s %9s %7s | %s\n", "shape", "M", "K", "N", "blas GF",
              "small GF", "gemm GF", "speedup", "blas cpu", "small cpu", "speedup", "ap::gemm uses");

  const std::vector<std::size_t> ms = quick ? std::vector<std::size_t>{8, 32, 128}
                                            : std::vector<std::size_t>{8, 16, 32, 64, 128, 256};
  struct kn { std::size_t k, n; };
  const std::vector<kn> sizes = quick ? std::vector<kn>{{2048, 2048}}
                                      : std::vector<kn>{{2048, 2048}, {784, 2048}, {2048, 784}};
  nlohmann::json rows = nlohmann::json::array();
  for (const kn& size : sizes) {
    for (int transpose_b = 0; transpose_b < 2; ++transpose_b) {
      const std::size_t k = size.k, n = size.n;
      std::vector<float> b(k * n);
      fill(b, 7);
      for (std::size_t m : ms) {
        std::vector<float> a(m * k), c(m * n, 0.0f);
        fill(a, static_cast<unsigned>(m));
        const double flops = 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
        auto run_blas = [&] { ap::gemm_blas(false, transpose_b, m, n, k, 1.0f, a.data(), b.data(), 0.0f, c.data()); };
        auto run_small = [&] {
          if (transpose_b)
            ap::small_gemm_nt(m, n, k, 1.0f, a.data(), k, b.data(), k, 0.0f, c.data(), n);
          else
            ap::small_gemm_nn(m, n, k, 1.0f, a.data(), k, b.data(), n, 0.0f, c.data(), n);
        };
        auto run_gemm = [&] { ap::gemm(false, transpose_b, m, n, k, 1.0f, a.data(), b.data(), 0.0f, c.data()); };
        run_blas();
        run_small();
        run_gemm();
        // Enough calls per repeat for ~20 ms, so short calls are not just timer noise.
        double t0 = seconds();
        run_blas();
        const double one = seconds() - t0;
        const int calls = std::max(1, static_cast<int>(0.02 / std::max(one, 1e-6)));
        std::vector<double> tb, ts, tg, cb, cs, cg;
        auto time = [&](auto&& f, std::vector<double>& wall, std::vector<double>& cpu) {
          const double start = seconds(), start_cpu = cpu_seconds();
          for (int i = 0; i < calls; ++i) f();
          cpu.push_back((cpu_seconds() - start_cpu) / calls);
          wall.push_back((seconds() - start) / calls);
        };
        for (int r = 0; r < repeats; ++r) {
          time(run_blas, tb, cb);
          time(run_small, ts, cs);
          time(run_gemm, tg, cg);
        }
        const double gb = flops / median(tb) * 1e-9, gs = flops / median(ts) * 1e-9,
                     gg = flops / median(tg) * 1e-9;
        const double gbc = flops / median(cb) * 1e-9, gsc = flops / median(cs) * 1e-9;
        const bool uses_small = ap::small_gemm_preferred(false, transpose_b, m, n, k);
        const char* shape = transpose_b ? "nt" : "nn";
        std::printf("%-5s %5zu %5zu %5zu | %9.1f %9.1f %9.1f | %6.2fx | %9.1f %9.1f %6.2fx | %s\n", shape, m, k, n,
                    gb, gs, gg, gs / gb, gbc, gsc, gsc / gbc, uses_small ? "small" : "openblas");
        std::fflush(stdout);
        rows.push_back({{"shape", shape}, {"m", m}, {"k", k}, {"n", n}, {"blas_gflops", gb}, {"small_gflops", gs},
                        {"gemm_gflops", gg},
                        {"blas_cpu_gflops", gbc}, {"small_cpu_gflops", gsc}, {"blas_best_gflops", flops / *std::min_element(tb.begin(), tb.end()) * 1e-9},
                        {"small_best_gflops", flops / *std::min_element(ts.begin(), ts.end()) * 1e-9},
                        {"gemm_uses", uses_small ? "small" : "openblas"}, {"calls_per_repeat", calls}});
      }
    }
  }
  const std::string load_after = load_average();
  std::printf("\nload average after: %s\n", load_after.c_str());
  nlohmann::json out = {{"bench", "bench_gemm"}, {"repeats", repeats}, {"blas_threads", 1},
                        {"small_gemm_compiled", ap::small_gemm_compiled()}, {"load_average_before", load_before},
                        {"load_average_after", load_after}, {"results", rows}};
  std::printf("%s\n", out.dump().c_str());
  return 0;
}

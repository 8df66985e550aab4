// bench_gemm: the GEMMs of training, on oneDNN (fp32 and bf16) next to the xtensor-blas reference (OpenBLAS).
//
// Shapes are the three products each Linear layer (in -> out) of the two MLPs computes per step, with the
// rows M a batch (256) or a pipeline microbatch (32):
//   fwd  y (M, out)   = x (M, in) W (in, out)
//   dx   dx (M, in)   = dy (M, out) W^T            (W stored (in, out))
//   dW   dW (in, out) += x^T dy                    (x stored (M, in): A transposed; accumulate, beta = 1)
// for 784-512-256-10 ("small") and 784-2048-2048-2048-10 ("heavy"), every backend on one thread. Each repeat
// times oneDNN fp32, oneDNN bf16 (bf16 inputs, fp32 accumulation and output) and the reference back to back,
// so all three see the same machine load; figures are GFLOPS of the median repeat by wall clock, and per model
// and M the total (all products' flops / all products' median times). The weights are warm (in cache after
// the first call), as they are for a stage that runs microbatch after microbatch.
// The load average is printed before and after: the machine may be shared.
//
// Usage: bench_gemm [--repeats R] [--quick]   (--quick: 3 repeats)
// Prints a table, then one JSON line.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/bench_support.hpp"
#include "tensor/bfloat16.hpp"
#include "tensor/compute.hpp"
#include "tensor/matmul.hpp"

namespace {

using ap::bench::load_average;
using ap::bench::median;


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


}  // namespace

int main(int argc, char** argv) {
  int repeats = 7;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--repeats") && i + 1 < argc) {
      repeats = std::max(1, std::atoi(argv[++i]));
    } else if (!std::strcmp(argv[i], "--quick")) {
      repeats = 3;
    } else {
      std::fprintf(stderr, "usage: %s [--repeats R] [--quick]\n", argv[0]);
      return 2;
    }
  }
  ap::set_compute_threads(1);
  if (!ap::onednn_available()) {
    std::fprintf(stderr, "bench_gemm: this build has no oneDNN (-DAP_COMPUTE=reference): nothing to compare\n");
    return 1;
  }
  const std::string load_before = load_average();
  std::printf("bench_gemm: oneDNN fp32 / bf16 vs the xtensor-blas reference (OpenBLAS), 1 thread, median of %d "
              "repeats\nload average before: %s\n\n",
              repeats, load_before.c_str());
  // Without AVX-512, gemm_onednn's fp32 products are OpenBLAS's in bands of rows (Note [fp32 products on
  // OpenBLAS without AVX-512] in tensor/matmul_onednn.cpp): its column then measures those.
  const char* fp32_path = ap::onednn_avx512() ? "onednn" : "openblas";
  if (!ap::onednn_avx512())
    std::printf("no AVX-512 here: the 'dnnl f32' column is the fast path's fp32 product, OpenBLAS in bands of "
                "rows, and bf16 widens to it\n\n");
  std::printf("%-6s %4s %-4s %5s %5s %5s | %9s %9s %9s | %8s %8s\n", "model", "M", "op", "m", "n", "k",
              "dnnl f32", "dnnl bf16", "ref f32", "f32/ref", "bf16/f32");

  struct model { const char* name; std::vector<std::size_t> widths; };
  const std::vector<model> models = {{"small", {784, 512, 256, 10}}, {"heavy", {784, 2048, 2048, 2048, 10}}};
  nlohmann::json rows = nlohmann::json::array(), totals = nlohmann::json::array();
  for (const model& md : models) {
    for (std::size_t rows_m : {std::size_t{256}, std::size_t{32}}) {
      double flops_total = 0.0, t_f32 = 0.0, t_bf16 = 0.0, t_ref = 0.0;
      for (std::size_t l = 0; l + 1 < md.widths.size(); ++l) {
        const std::size_t in = md.widths[l], out = md.widths[l + 1];
        struct product { const char* op; bool ta, tb; std::size_t m, n, k; float beta; };
        const product products[] = {{"fwd", false, false, rows_m, out, in, 0.0f},
                                    {"dx", false, true, rows_m, in, out, 0.0f},
                                    {"dW", true, false, in, out, rows_m, 1.0f}};
        for (const product& p : products) {
          std::vector<float> a(p.m * p.k), b(p.k * p.n), c(p.m * p.n, 0.0f);
          fill(a, static_cast<unsigned>(p.m + p.k));
          fill(b, 7);
          std::vector<ap::bfloat16> a16(a.size()), b16(b.size());
          ap::to_bfloat16(a.data(), a16.data(), a.size());
          ap::to_bfloat16(b.data(), b16.data(), b.size());
          const double flops = 2.0 * double(p.m) * double(p.n) * double(p.k);
          auto run_f32 = [&] { ap::gemm_onednn(p.ta, p.tb, p.m, p.n, p.k, 1.0f, a.data(), b.data(), p.beta, c.data()); };
          auto run_bf16 = [&] { ap::gemm_onednn(p.ta, p.tb, p.m, p.n, p.k, 1.0f, a16.data(), b16.data(), p.beta, c.data()); };
          auto run_ref = [&] { ap::gemm_reference(p.ta, p.tb, p.m, p.n, p.k, 1.0f, a.data(), b.data(), p.beta, c.data()); };
          run_f32();  // creates and caches the primitives
          run_bf16();
          run_ref();
          // Enough calls per repeat for ~10 ms, so short calls are not just timer noise.
          const double t0 = seconds();
          run_f32();
          const int calls = std::max(1, static_cast<int>(0.01 / std::max(seconds() - t0, 1e-6)));
          std::vector<double> tf, tb, tr;
          auto time = [&](auto&& f, std::vector<double>& wall) {
            const double start = seconds();
            for (int i = 0; i < calls; ++i) f();
            wall.push_back((seconds() - start) / calls);
          };
          for (int r = 0; r < repeats; ++r) {
            time(run_f32, tf);
            time(run_bf16, tb);
            time(run_ref, tr);
          }
          const double mf = median(tf), mb = median(tb), mr = median(tr);
          flops_total += flops, t_f32 += mf, t_bf16 += mb, t_ref += mr;
          std::printf("%-6s %4zu %-4s %5zu %5zu %5zu | %9.1f %9.1f %9.1f | %7.2fx %7.2fx\n", md.name, rows_m, p.op,
                      p.m, p.n, p.k, flops / mf * 1e-9, flops / mb * 1e-9, flops / mr * 1e-9, mr / mf, mf / mb);
          std::fflush(stdout);
          rows.push_back({{"model", md.name}, {"rows", rows_m}, {"op", p.op}, {"m", p.m}, {"n", p.n}, {"k", p.k},
                          {"onednn_f32_gflops", flops / mf * 1e-9}, {"onednn_bf16_gflops", flops / mb * 1e-9},
                          {"reference_f32_gflops", flops / mr * 1e-9}, {"calls_per_repeat", calls}});
        }
      }
      std::printf("%-6s %4zu %-4s %17s | %9.1f %9.1f %9.1f | %7.2fx %7.2fx   <- all products of a step\n\n",
                  md.name, rows_m, "all", "", flops_total / t_f32 * 1e-9, flops_total / t_bf16 * 1e-9,
                  flops_total / t_ref * 1e-9, t_ref / t_f32, t_f32 / t_bf16);
      totals.push_back({{"model", md.name}, {"rows", rows_m}, {"onednn_f32_gflops", flops_total / t_f32 * 1e-9},
                        {"onednn_bf16_gflops", flops_total / t_bf16 * 1e-9},
                        {"reference_f32_gflops", flops_total / t_ref * 1e-9}});
    }
  }
  const std::string load_after = load_average();
  std::printf("load average after: %s\n", load_after.c_str());
  nlohmann::json out = {{"bench", "bench_gemm"}, {"repeats", repeats}, {"threads", 1}, {"fp32_fast_path", fp32_path},
                        {"load_average_before", load_before}, {"load_average_after", load_after},
                        {"totals", totals}, {"results", rows}};
  std::printf("%s\n", out.dump().c_str());
  return 0;
}

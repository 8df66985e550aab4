// bench_gemm_threads: the training products on a rank of N threads, one N-thread oneDNN call against N bands of
// rows, each a 1-thread call (what Note [rows split among the team] in tensor/matmul_onednn.cpp chooses between),
// beside the same product on one thread. Shapes: the GPT's Linear products (dim 256, its 768 / 256 / 1024 / 256
// wide layers and the 256-class head) at a whole batch of 8,192 rows and a microbatch of 1,024; the heavy MLP's
// (784 -> 2048 -> 2048 -> 10) at 1,024 and 128 rows. Products: fwd y = x W, dx = dy W^T, dW += x^T dy. GFLOPS
// of the median of --repeats calls after one warm-up (each call on warm operands, as in training).
//
// Usage: bench_gemm_threads [--threads 4,16] [--repeats N]   (thread counts above this machine's cores are run
// all the same: on fewer cores they measure time-slicing, not the split)
// Prints a table, then one JSON line.
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <omp.h>

#include "bench/bench_support.hpp"
#include "tensor/compute.hpp"
#include "tensor/matmul.hpp"

namespace {

struct product {
  const char* model;
  std::size_t rows, in, out;
  int kind;  // 0 fwd, 1 dx, 2 dW
};

const char* kind_name(int kind) { return kind == 0 ? "fwd" : kind == 1 ? "dx" : "dW"; }

// The gemm call of one product on rows [first, last) of its batch (all of it for the whole product).
void call(const product& p, std::size_t first, std::size_t last, const float* x, const float* w, const float* dy,
          float* y, float* dx, float* dw) {
  const std::size_t r = last - first;
  if (p.kind == 0) ap::gemm(false, false, r, p.out, p.in, 1.0f, x + first * p.in, w, 0.0f, y + first * p.out);
  if (p.kind == 1) ap::gemm(false, true, r, p.in, p.out, 1.0f, dy + first * p.out, w, 0.0f, dx + first * p.in);
}

// dW's rows are W's in-features: a band is a block of them, i.e. a block of x's columns. gemm takes no leading
// dimension, so the bands read rows of xt = x^T (in, rows), a transposed copy made once and not timed: each band
// is then a product with A not transposed and the whole sum (k = rows) in one call.
void call_dw(const product& p, std::size_t first, std::size_t last, const float* xt, const float* dy, float* dw) {
  ap::gemm(false, false, last - first, p.out, p.rows, 1.0f, xt + first * p.rows, dy, 1.0f, dw + first * p.out);
}

double median_seconds(int repeats, const std::function<void()>& f) {
  f();
  std::vector<double> t;
  for (int i = 0; i < repeats; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return ap::bench::median(t);
}

}  // namespace

int main(int argc, char** argv) try {
  std::vector<int> thread_counts = {4, 16};
  int repeats = 7;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--threads" && i + 1 < argc) {
      thread_counts.clear();
      for (std::string t = argv[++i]; !t.empty();) {
        const auto comma = t.find(',');
        thread_counts.push_back(std::stoi(t.substr(0, comma)));
        t = comma == std::string::npos ? "" : t.substr(comma + 1);
      }
    } else if (a == "--repeats" && i + 1 < argc) {
      repeats = std::stoi(argv[++i]);
    } else {
      throw std::invalid_argument("unknown flag " + a);
    }
  }
  std::vector<product> products;
  for (const std::size_t rows : {std::size_t{8192}, std::size_t{1024}})
    for (const auto& [in, out] : std::vector<std::pair<std::size_t, std::size_t>>{{256, 768}, {256, 256}, {256, 1024}, {1024, 256}})
      for (int kind = 0; kind < 3; ++kind) products.push_back({"gpt", rows, in, out, kind});
  for (const std::size_t rows : {std::size_t{1024}, std::size_t{128}})
    for (const auto& [in, out] : std::vector<std::pair<std::size_t, std::size_t>>{{784, 2048}, {2048, 2048}})
      for (int kind = 0; kind < 3; ++kind) products.push_back({"mlp", rows, in, out, kind});
  std::printf("bench_gemm_threads: GFLOPS, median of %d calls; load %s\n", repeats, ap::bench::load_average().c_str());
  std::printf("%-4s %5s %-3s %5s %5s %5s %8s", "", "rows", "op", "m", "n", "k", "1 thr");
  for (int n : thread_counts) std::printf("  %5d call %5d bands", n, n);
  std::printf("\n");
  nlohmann::json out = nlohmann::json::array();
  for (const product& p : products) {
    const std::size_t widest = std::max(p.in, p.out);
    std::vector<float> x(p.rows * widest, 0.25f), w(widest * widest, 0.125f), dy(p.rows * widest, 0.5f),
        y(p.rows * widest), dx(p.rows * widest), dw(widest * widest, 0.0f), xt(p.rows * widest, 0.25f);
    const double flops = 2.0 * double(p.rows) * double(p.in) * double(p.out);
    const auto whole = [&] {
      if (p.kind < 2) call(p, 0, p.rows, x.data(), w.data(), dy.data(), y.data(), dx.data(), dw.data());
      else ap::gemm(true, false, p.in, p.out, p.rows, 1.0f, x.data(), dy.data(), 1.0f, dw.data());
    };
    const auto bands = [&](int n) {
      const std::size_t m = p.kind == 2 ? p.in : p.rows;
#pragma omp parallel num_threads(n)
      {
        omp_set_num_threads(1);
        const auto b = static_cast<std::size_t>(omp_get_thread_num()), team = static_cast<std::size_t>(omp_get_num_threads());
        const std::size_t first = m * b / team, last = m * (b + 1) / team;
        if (p.kind < 2) call(p, first, last, x.data(), w.data(), dy.data(), y.data(), dx.data(), dw.data());
        else call_dw(p, first, last, xt.data(), dy.data(), dw.data());
      }
    };
    const std::size_t m = p.kind == 2 ? p.in : p.rows, n = p.kind == 1 ? p.in : p.out,
                      k = p.kind == 0 ? p.in : p.kind == 1 ? p.out : p.rows;
    ap::set_compute_threads(1);
    const double one = flops / median_seconds(repeats, whole) * 1e-9;
    std::printf("%-4s %5zu %-3s %5zu %5zu %5zu %8.1f", p.model, p.rows, kind_name(p.kind), m, n, k, one);
    nlohmann::json row{{"model", p.model}, {"rows", p.rows}, {"op", kind_name(p.kind)}, {"m", m}, {"n", n}, {"k", k},
                       {"one_thread", one}};
    for (int t : thread_counts) {
      ap::set_compute_threads(t);
      const double c = flops / median_seconds(repeats, whole) * 1e-9;
      ap::set_compute_threads(1);
      const double b = flops / median_seconds(repeats, [&] { bands(t); }) * 1e-9;
      std::printf("  %10.1f %11.1f", c, b);
      row["call_" + std::to_string(t)] = c;
      row["bands_" + std::to_string(t)] = b;
    }
    std::printf("\n");
    std::fflush(stdout);
    out.push_back(row);
  }
  std::printf("%s\n", nlohmann::json{{"bench", "gemm_threads"}, {"rows", out}}.dump().c_str());
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_gemm_threads: %s\n", e.what());
  return 1;
}

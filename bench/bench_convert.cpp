// bench_convert: float32 <-> bfloat16 buffer conversion, the project's loops (tensor/bfloat16.cpp, which GCC
// vectorises at -O3 -march=native) next to oneDNN's reorder, on 16M elements, one thread (as a stage runs)
// and, for the reorder, also two OpenMP threads.
//
// GB/s counts the bytes read plus the bytes written (16M elements: 64 MB + 32 MB each way) over the median
// of the repeats. Before timing, each oneDNN result is compared bit for bit with the scalar to_bfloat16 /
// to_float on random data with NaN (with payloads), infinities, exact ties, subnormals and overflow
// (Note [conversions] in bfloat16.hpp says why the loops are kept).
//
// Usage: bench_convert [--repeats R] [--elements N]   (N = 131072: buffers that stay in L2)
#include <algorithm>
#include <cmath>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "bench/bench_support.hpp"
#include "random/seeded_random.hpp"
#include "tensor/bfloat16.hpp"

#ifdef AP_HAVE_ONEDNN
#include <omp.h>

#include "tensor/onednn_context.hpp"
#endif

namespace {

using ap::bench::load_average;

double median_seconds(int repeats, const std::function<void()>& f) {
  f();  // warm: pages touched, primitives created
  std::vector<double> t;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

float bits_to_float(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// Random floats over many magnitudes, with every special case sprinkled in.
std::vector<float> test_data(std::size_t n) {
  std::vector<float> x(n);
  ap::splitmix64 random(42);
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint64_t r = random.next();
    switch (r % 16) {
      case 0: x[i] = bits_to_float(0x7f800000u | std::uint32_t(r >> 40) | 1u); break;  // NaN, random payload
      case 1: x[i] = bits_to_float(0xff800001u); break;                                 // -NaN, low payload
      case 2: x[i] = (r >> 8) & 1 ? INFINITY : -INFINITY; break;
      case 3: x[i] = bits_to_float((std::uint32_t(r >> 16) & 0xffff0000u) | 0x8000u); break;  // exact tie
      case 4: x[i] = bits_to_float(std::uint32_t(r >> 32) & 0x807fffffu); break;      // subnormal (or zero)
      case 5: x[i] = bits_to_float(0x7f7fffffu); break;                                 // rounds to infinity
      default: x[i] = bits_to_float(std::uint32_t(r >> 32)); break;                     // any bit pattern
    }
  }
  return x;
}

void report(const char* what, std::size_t bytes, double s) {
  std::printf("  %-16s %10.1f us  %6.1f GB/s\n", what, s * 1e6, double(bytes) / s / 1e9);
}

}  // namespace

int main(int argc, char** argv) {
  int repeats = 15;
  std::size_t n = std::size_t(1) << 24;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--repeats") repeats = std::stoi(argv[i + 1]);
    if (a == "--elements") n = std::stoull(argv[i + 1]);
  }
  std::printf("bench_convert: %zu elements, median of %d repeats, load %s\n", n, repeats, load_average().c_str());
  const std::vector<float> x = test_data(n);
  std::vector<ap::bfloat16> b(n), b_ref(n);
  std::vector<float> back(n), back_ref(n);
  const std::size_t bytes = n * (sizeof(float) + sizeof(ap::bfloat16));

  for (std::size_t i = 0; i < n; ++i) b_ref[i] = ap::to_bfloat16(x[i]);
  for (std::size_t i = 0; i < n; ++i) back_ref[i] = ap::to_float(b_ref[i]);
  ap::to_bfloat16(x.data(), b.data(), n);
  ap::to_float(b_ref.data(), back.data(), n);
  const bool loops_equal = std::memcmp(b.data(), b_ref.data(), n * 2) == 0 &&
                           std::memcmp(back.data(), back_ref.data(), n * 4) == 0;
  std::printf("project loops (tensor/bfloat16.cpp), 1 thread: bitwise equal to the scalar: %s\n",
              loops_equal ? "yes" : "NO");
  report("f32 -> bf16", bytes, median_seconds(repeats, [&] { ap::to_bfloat16(x.data(), b.data(), n); }));
  report("bf16 -> f32", bytes, median_seconds(repeats, [&] { ap::to_float(b_ref.data(), back.data(), n); }));

#ifdef AP_HAVE_ONEDNN
  using dnnl::memory;
  const memory::dims dims{static_cast<memory::dim>(n)};
  const memory::desc f32_desc(dims, memory::data_type::f32, memory::format_tag::a);
  const memory::desc bf16_desc(dims, memory::data_type::bf16, memory::format_tag::a);
  auto& eng = ap::onednn::engine();
  memory mx(f32_desc, eng, const_cast<float*>(x.data())), mb(bf16_desc, eng, b.data());
  memory mb_ref(bf16_desc, eng, b_ref.data()), mback(f32_desc, eng, back.data());
  for (int threads : {1, 2}) {
    omp_set_num_threads(threads);
    const dnnl::reorder::primitive_desc down_pd(mx, mb), up_pd(mb_ref, mback);
    const dnnl::reorder down(down_pd), up(up_pd);
    auto& st = ap::onednn::stream();
    auto run_down = [&] { down.execute(st, mx, mb); st.wait(); };
    auto run_up = [&] { up.execute(st, mb_ref, mback); st.wait(); };
    run_down();
    run_up();
    std::size_t down_diff = 0, up_diff = 0, subnormal_diff = 0;
    for (std::size_t i = 0; i < n; ++i) {
      if (b[i].bits != b_ref[i].bits) {
        ++down_diff;
        std::uint32_t u;
        std::memcpy(&u, &x[i], 4);
        if ((u & 0x7f800000u) == 0) ++subnormal_diff;
      }
      if (std::memcmp(&back[i], &back_ref[i], 4) != 0) ++up_diff;
    }
    std::printf("oneDNN reorder (%s), %d thread%s: elements differing from the scalar: f32->bf16 %zu (%zu of them "
                "subnormal inputs), bf16->f32 %zu\n",
                down_pd.impl_info_str(), threads, threads > 1 ? "s" : "",
                down_diff, subnormal_diff, up_diff);
    report("f32 -> bf16", bytes, median_seconds(repeats, run_down));
    report("bf16 -> f32", bytes, median_seconds(repeats, run_up));
  }
#else
  std::printf("oneDNN: not built (AP_COMPUTE=reference)\n");
#endif
  std::printf("load after: %s\n", load_average().c_str());
  return 0;
}

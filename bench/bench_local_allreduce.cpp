// bench_local_allreduce: all-reduce between D threads of one process (local_group): bus bandwidth of large
// (data-parallel gradient) reductions and the latency of small (tensor-parallel activation) ones.
//   bench_local_allreduce [REPEATS] [MAX_D]      (defaults: 5 repeats, D = 2, 4, 8)
// Every rank's thread starts the all-reduce and waits for it, as a replica does at the end of its backward;
// a round is timed from a barrier before the start to a barrier after every wait. Bus bandwidth as NCCL's
// tests count it: bytes x 2 (D - 1) / D / time. Small all-reduces run 200 back to back per round (a
// tensor-parallel layer's forward and backward), reported as microseconds per all-reduce.
// "cpu" is the CPU time of the whole process per all-reduce (every thread): what the work costs whatever
// else runs on the machine.
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <mutex>
#include <thread>
#include <vector>

#include <sys/resource.h>

#include <nlohmann/json.hpp>

#include "bench_support.hpp"
#include "collective/local_group.hpp"

namespace {

using clock_type = std::chrono::steady_clock;

// CPU seconds (user + system) of every thread of this process so far.
double process_cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  const auto s = [](const timeval& t) { return static_cast<double>(t.tv_sec) + 1e-6 * static_cast<double>(t.tv_usec); };
  return s(u.ru_utime) + s(u.ru_stime);
}

struct timing {
  double seconds = 0;      // wall, median over rounds
  double cpu_seconds = 0;  // CPU of the whole process, median over rounds: what the work costs, whatever the load
};

// C++17 has no std::barrier.
class barrier {
 public:
  explicit barrier(int n) : n_(n) {}
  void arrive_and_wait() {
    std::unique_lock lock(m_);
    const long gen = generation_;
    if (++arrived_ == n_) {
      arrived_ = 0;
      ++generation_;
      cv_.notify_all();
    } else {
      cv_.wait(lock, [&] { return generation_ != gen; });
    }
  }

 private:
  std::mutex m_;
  std::condition_variable cv_;
  int n_, arrived_ = 0;
  long generation_ = 0;
};

// Seconds per round (median over `repeats` rounds after one warm-up) of `per_round` all-reduces of
// `floats` floats on each of `d` ranks.
timing time_all_reduce(int d, std::size_t floats, int repeats, int per_round) {
  ap::local_group group("bench", d);
  barrier sync(d);
  std::vector<double> times, cpu;
  std::vector<std::thread> threads;
  for (int r = 0; r < d; ++r)
    threads.emplace_back([&, r] {
      auto member = group.member(r);
      ap::tensor t = ap::tensor::from_shape({floats});
      for (std::size_t i = 0; i < floats; ++i) t.data()[i] = static_cast<float>((i + r) % 13) * 0.25f;
      for (int round = 0; round <= repeats; ++round) {
        sync.arrive_and_wait();
        const auto t0 = clock_type::now();
        const double c0 = r == 0 ? process_cpu_seconds() : 0.0;
        for (int k = 0; k < per_round; ++k) member->all_reduce(t).wait();
        sync.arrive_and_wait();
        if (r == 0 && round > 0) {
          times.push_back(std::chrono::duration<double>(clock_type::now() - t0).count());
          cpu.push_back(process_cpu_seconds() - c0);
        }
      }
    });
  for (auto& t : threads) t.join();
  return {ap::bench::median(times), ap::bench::median(cpu)};
}

}  // namespace

int main(int argc, char** argv) {
  const int repeats = argc > 1 ? std::atoi(argv[1]) : 5;
  const int max_d = argc > 2 ? std::atoi(argv[2]) : 8;
  nlohmann::json rows = nlohmann::json::array();
  std::cout << "all-reduce between threads of one process (local_group), " << std::thread::hardware_concurrency()
            << " cores, median of " << repeats << ", load " << ap::bench::load_average() << "\n"
            << "  D      size   time ms   bus GB/s   cpu ms\n";
  for (int d = 2; d <= max_d; d *= 2)
    for (std::size_t mb : {1, 4, 16, 40}) {
      const std::size_t floats = mb * (1u << 20) / 4;
      const timing t = time_all_reduce(d, floats, repeats, 1);
      const double bus = static_cast<double>(floats * 4) * 2.0 * (d - 1) / d / t.seconds / 1e9;
      std::printf("%3d %6zu MB %9.2f %10.3f %8.2f\n", d, mb, t.seconds * 1e3, bus, t.cpu_seconds * 1e3);
      rows.push_back({{"d", d}, {"bytes", floats * 4}, {"median_ms", t.seconds * 1e3}, {"bus_gb_s", bus},
                      {"cpu_ms", t.cpu_seconds * 1e3}});
    }
  std::cout << "small all-reduces back to back (tensor-parallel activations), load " << ap::bench::load_average()
            << "\n  D      size   us each   cpu us each\n";
  const int per_round = 200;
  for (int d = 2; d <= max_d; d *= 2)
    for (std::size_t kb : {4, 64, 256}) {
      const std::size_t floats = kb * 1024 / 4;
      const timing t = time_all_reduce(d, floats, repeats, per_round);
      const double s = t.seconds / per_round, cpu = t.cpu_seconds / per_round;
      std::printf("%3d %6zu KB %9.1f %13.1f\n", d, kb, s * 1e6, cpu * 1e6);
      rows.push_back({{"d", d}, {"bytes", floats * 4}, {"us_each", s * 1e6}, {"cpu_us_each", cpu * 1e6}});
    }
  std::cout << nlohmann::json{{"bench", "allreduce_local"}, {"load", ap::bench::load_average()}, {"rows", rows}}.dump()
            << std::endl;
}

// bench_tp_overlap: what overlapping tensor-parallel all-reduces with the weight gradients saves (Note
// [overlapped backward] in model/parallel_linear.hpp). T ranks (threads of one process, a local_group) run
// the Megatron MLP (column_linear -> gelu -> row_linear) and a GPT block, forward then backward, two ways in
// the same run, alternating: "overlapped" is the fused backward (the column layers start their partial dx's
// all-reduce, compute their weight gradients, then wait); "in turn" is backward_input then backward_weight
// per layer (the all-reduce waited on before any weight gradient: the order before the overlap). Both give
// the same bits (test_model_tensor_parallel).
//
// Printed per model and way: the backward's median time per step (the slowest rank's) and how long the ranks
// spent blocked in the backward's all-reduce waits. The overlap can only pay where the group's communication
// thread has a core of its own: with T ranks x threads filling every core it takes its cycles from the GEMMs.
//
// Usage: bench_tp_overlap [--ranks T] [--threads K per rank] [--rows N] [--width D] [--repeats R]
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_support.hpp"
#include "collective/local_group.hpp"
#include "model/gpt_spec.hpp"
#include "model/sequential.hpp"
#include "model/tensor_parallel.hpp"
#include "random/seeded_random.hpp"
#include "tensor/compute.hpp"

namespace {

using namespace ap;
using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

// A real group member that adds the time its caller spends in wait() to `waited` (seconds, this rank's).
class timed_group final : public process_group {
 public:
  timed_group(std::unique_ptr<process_group> inner, double* waited) : inner_(std::move(inner)), waited_(waited) {}
  const std::string& name() const override { return inner_->name(); }
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  collective_handle all_reduce(tensor& t, reduce_op op) override { return timed(inner_->all_reduce(t, op)); }
  collective_handle reduce_scatter(const tensor& in, tensor& out, reduce_op op) override {
    return timed(inner_->reduce_scatter(in, out, op));
  }
  collective_handle all_gather(const tensor& in, tensor& out) override { return timed(inner_->all_gather(in, out)); }
  collective_handle broadcast(tensor& t, int root) override { return timed(inner_->broadcast(t, root)); }
  void abort(const std::string& reason) override { inner_->abort(reason); }

 private:
  struct timed_state final : collective_handle::state {
    collective_handle inner;
    double* waited;
    void wait() override {
      const auto t0 = clock_type::now();
      inner.wait();
      *waited += seconds_since(t0);
    }
    bool ready() const override { return inner.ready(); }
  };
  collective_handle timed(collective_handle h) {
    auto st = std::make_shared<timed_state>();
    st->inner = std::move(h);
    st->waited = waited_;
    return collective_handle(st);
  }
  std::unique_ptr<process_group> inner_;
  double* waited_;
};

tensor random_tensor(const std::vector<std::size_t>& shape, std::uint64_t seed) {
  tensor t = tensor::from_shape(shape);
  for (std::size_t i = 0; i < t.size(); ++i) t.data()[i] = symmetric_unit_float(hash_counters(seed, i));
  return t;
}

struct way_result {
  std::vector<double> backward_s;  // per repeat: the slowest rank's backward
  std::vector<double> waited_s;    // per repeat: the slowest rank's time blocked in backward all-reduces
};

// `repeats` steps of forward and backward of `specs` on T ranks, the backward fused (overlapped) or in turn.
way_result run(const std::vector<std::string>& specs, const std::vector<std::size_t>& x_shape, int ranks,
               int threads, int repeats, bool overlapped) {
  local_group group("tp", ranks);
  const tensor x = random_tensor(x_shape, 1), dy = random_tensor(x_shape, 2);
  std::vector<std::vector<double>> backward(ranks, std::vector<double>(repeats)), waited = backward;
  std::vector<std::thread> workers;
  for (int r = 0; r < ranks; ++r)
    workers.emplace_back([&, r] {
      use_compute_cores({threads, {}});
      double waiting = 0.0;
      sequential model = sequential::from_layer_specs(specs);
      join_tensor_parallel(model, std::make_shared<timed_group>(group.member(r), &waiting));
      model.initialize(7);
      for (int k = -1; k < repeats; ++k) {  // k = -1: warm-up
        std::vector<layer_cache> caches(model.size());
        tensor h = x;
        for (std::size_t i = 0; i < model.size(); ++i) h = model.at(i).forward(h, caches[i], {});
        waiting = 0.0;
        const auto t0 = clock_type::now();
        tensor d = dy;
        for (std::size_t i = model.size(); i-- > 0;) {
          tensor below;
          if (overlapped) {
            model.at(i).backward(d, caches[i], &below);
          } else {
            model.at(i).backward_input(d, caches[i], &below);
            model.at(i).backward_weight(d, caches[i]);
          }
          d = std::move(below);
        }
        if (k >= 0) {
          backward[r][k] = seconds_since(t0);
          waited[r][k] = waiting;
        }
      }
    });
  for (auto& w : workers) w.join();
  way_result out;
  for (int k = 0; k < repeats; ++k) {
    double b = 0.0, w = 0.0;
    for (int r = 0; r < ranks; ++r) b = std::max(b, backward[r][k]), w = std::max(w, waited[r][k]);
    out.backward_s.push_back(b);
    out.waited_s.push_back(w);
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  int ranks = 2, threads = 1, repeats = 9;
  std::size_t rows = 1024, width = 1024;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) {
      std::fprintf(stderr, "bench_tp_overlap: %s needs a value\n", flag.c_str());
      return 2;
    }
    const char* value = argv[++i];
    if (flag == "--ranks") ranks = std::atoi(value);
    else if (flag == "--threads") threads = std::atoi(value);
    else if (flag == "--rows") rows = std::strtoul(value, nullptr, 10);
    else if (flag == "--width") width = std::strtoul(value, nullptr, 10);
    else if (flag == "--repeats") repeats = std::atoi(value);
    else {
      std::fprintf(stderr, "bench_tp_overlap: unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  if (ranks < 1 || threads < 1 || repeats < 1 || rows == 0 || width == 0 || width % 64 != 0) {
    std::fprintf(stderr, "bench_tp_overlap: ranks, threads, repeats, rows and width must be positive, width a "
                         "multiple of 64\n");
    return 2;
  }
  const std::string w = std::to_string(width), hidden = std::to_string(4 * width);
  struct model_case {
    std::string name;
    std::vector<std::string> specs;
    std::vector<std::size_t> x_shape;
  };
  const std::size_t context = 128;
  const std::vector<model_case> cases = {
      {"MLP " + w + "-" + hidden + "-" + w + ", " + std::to_string(rows) + " rows",
       {"column_linear:" + w + ":" + hidden, "gelu", "row_linear:" + hidden + ":" + w},
       {rows, width}},
      {"GPT block dim " + w + ", " + std::to_string(width / 64) + " heads, " + std::to_string(rows / context) +
           " x " + std::to_string(context) + " tokens",
       tensor_parallel_specs({gpt_block_spec(width, width / 64)}),
       {rows / context, context, width}},
  };
  std::printf("bench_tp_overlap: T=%d ranks x %d thread(s), %u cores, load %s, median of %d steps\n", ranks, threads,
              std::thread::hardware_concurrency(), bench::load_average().c_str(), repeats);
  std::printf("%-44s %-11s %14s %22s\n", "model", "backward", "ms per step", "ms blocked in waits");
  for (const model_case& c : cases) {
    way_result turn, over;
    for (int round = 0; round < 2; ++round) {  // alternating, twice
      const way_result t = run(c.specs, c.x_shape, ranks, threads, repeats, false);
      const way_result o = run(c.specs, c.x_shape, ranks, threads, repeats, true);
      turn.backward_s.insert(turn.backward_s.end(), t.backward_s.begin(), t.backward_s.end());
      turn.waited_s.insert(turn.waited_s.end(), t.waited_s.begin(), t.waited_s.end());
      over.backward_s.insert(over.backward_s.end(), o.backward_s.begin(), o.backward_s.end());
      over.waited_s.insert(over.waited_s.end(), o.waited_s.begin(), o.waited_s.end());
    }
    const double tb = bench::median(turn.backward_s) * 1e3, tw = bench::median(turn.waited_s) * 1e3;
    const double ob = bench::median(over.backward_s) * 1e3, ow = bench::median(over.waited_s) * 1e3;
    std::printf("%-44s %-11s %14.2f %22.2f\n", c.name.c_str(), "in turn", tb, tw);
    std::printf("%-44s %-11s %14.2f %22.2f   (%.2fx the time)\n", "", "overlapped", ob, ow, ob / tb);
  }
  return 0;
}

// `actorpipe train --threads`: the intra-op threads of every compute rank (the single process, each stage, each
// data- or tensor-parallel rank), pinned to their own cores where they fit, and the layout printed.
#include <doctest/doctest.h>

#include <chrono>
#include <string>

#include <nlohmann/json.hpp>

#include "cli_runs.hpp"
#include "node_process.hpp"
#include "plan/cores.hpp"
#include "test_support.hpp"

using namespace ap;
using namespace std::chrono_literals;

using test::actorpipe;

// What `train` prints for D replicas x P stages (0: no pipeline) x T ranks of `threads` each, on this process's cores.
std::string expected_layout(int D, int P, int T, int threads) {
  const std::vector<int> cores = process_cores();
  return "cores: " + cores_layout_text(rank_names(D, P, T), assign_cores(cores, D * std::max(P, 1) * T, threads),
                                       cores.size());
}

TEST_CASE("--threads gives every stage and every replica its threads, and train prints where each computes") {
  struct run {
    std::vector<std::string> flags;
    int D, P, T;
  };
  for (const run& r : {run{{"--stages", "2", "--threads", "1"}, 1, 2, 1}, run{{"--stages", "1"}, 1, 1, 1},
                       run{{"--data-parallel", "2", "--threads", "1"}, 2, 0, 1},
                       run{{"--stages", "2", "--tensor-parallel", "2", "--microbatches", "2"}, 1, 2, 2}}) {
    std::vector<std::string> args{"train", "--train-limit", "256", "--max-steps", "1", "--batch-size", "64"};
    args.insert(args.end(), r.flags.begin(), r.flags.end());
    const test::program_run train = test::run_actorpipe(args);
    const std::string& log = train.err;
    INFO(log);
    test::result_of(train);
    const int threads = r.flags.size() > 2 && r.flags[2] == "--threads" ? 1 : 0;
    CHECK(test::contains(log, expected_layout(r.D, r.P, r.T, threads)));
  }
}

TEST_CASE("a one-stage pipeline with 2 threads per stage trains to the loss of 1 thread") {
  double losses[2] = {0, 0};
  int i = 0;
  for (const char* threads : {"1", "2"}) {
    const nlohmann::json out = test::result_of(test::run_actorpipe({"train", "--stages", "1", "--microbatches", "2",
                                                                    "--threads", threads, "--train-limit", "512",
                                                                    "--max-steps", "3", "--batch-size", "64"}));
    losses[i++] = out.at("last_epoch_mean_loss").get<double>();
  }
  CHECK(losses[0] == doctest::Approx(losses[1]).epsilon(1e-5));  // more threads may split a GEMM's sums otherwise
}

TEST_CASE("the single process trains with one thread and with every core, to the same loss") {
  double losses[2] = {0, 0};
  int i = 0;
  for (const char* threads : {"1", "0"}) {
    const nlohmann::json out = test::result_of(
        test::run_actorpipe({"train", "--threads", threads, "--train-limit", "512", "--max-steps", "3", "--batch-size", "64"}));
    losses[i++] = out.at("last_epoch_mean_loss").get<double>();
  }
  // More threads may split a GEMM's sums differently: equal up to float rounding.
  CHECK(losses[0] == doctest::Approx(losses[1]).epsilon(1e-5));
  CHECK(losses[0] > 0.0);
}

TEST_CASE("two nodes on one machine pin their stages to disjoint cores (Note [cores on nodes])") {
  // Each node used to divide all of the machine's cores among its own ranks alone: both pinned their one stage to
  // the first cores, and the two stages time-sliced them (0.55x the one-process pipeline in bench_network).
  test::node_process a(actorpipe, {"--insecure"}), b(actorpipe, {"--insecure"});
  test::result_of(test::run_actorpipe({"train", "--train-limit", "256", "--max-steps", "1", "--batch-size", "64",
                                       "--stages", "2", "--nodes", a.address() + "," + b.address(), "--insecure"}));
  const auto expected = assign_cores(process_cores(), 2, 0);  // the machine's cores for its 2 ranks
  const std::string a_log = a.process().stderr_text(), b_log = b.process().stderr_text();
  INFO(a_log);
  INFO(b_log);
  CHECK(test::contains(a_log, "stage 0 started: "));
  CHECK(test::contains(a_log, " on " + cores_text(expected[0])));
  CHECK(test::contains(b_log, "stage 1 started: "));
  CHECK(test::contains(b_log, " on " + cores_text(expected[1])));
  if (!expected[0].cores.empty()) CHECK(expected[0].cores != expected[1].cores);
}

// `actorpipe train --threads`: the single process's compute threads; refused, before any work, with --stages.
#include <doctest/doctest.h>

#include <chrono>
#include <string>

#include <nlohmann/json.hpp>

#include "node_process.hpp"
#include "test_support.hpp"

using namespace ap;
using namespace std::chrono_literals;

namespace {
const std::string actorpipe = std::string(AP_BINARY_DIR) + "/cli/actorpipe";
}  // namespace

TEST_CASE("--threads with --stages is refused at once, naming both flags") {
  test::child_process train({actorpipe, "train", "--stages", "2", "--threads", "2"});
  CHECK(train.wait_exit(10s) == 1);
  const std::string log = train.stderr_text();
  INFO(log);
  CHECK(test::contains(log, "--threads 2 is for the single process (no --stages): each of the 2 pipeline stages "
                            "computes on one thread"));
}

TEST_CASE("the single process trains with one thread and with every core, to the same loss") {
  double losses[2] = {0, 0};
  int i = 0;
  for (const char* threads : {"1", "0"}) {
    test::child_process train({actorpipe, "train", "--threads", threads, "--train-limit", "512", "--max-steps", "3",
                               "--batch-size", "64"});
    const std::string json = train.read_line(60s);  // the one JSON line at the end
    CHECK(train.wait_exit(10s) == 0);
    INFO(train.stderr_text());
    REQUIRE(!json.empty());
    losses[i++] = nlohmann::json::parse(json).at("last_epoch_mean_loss").get<double>();
  }
  // More threads may split a GEMM's sums differently: equal up to float rounding.
  CHECK(losses[0] == doctest::Approx(losses[1]).epsilon(1e-5));
  CHECK(losses[0] > 0.0);
}

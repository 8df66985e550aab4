// `actorpipe train --data-parallel D --tensor-parallel T --clip-grad-norm X`: a real run of the program on
// Fashion-MNIST, the same result as one process, and bad meshes refused before any data is read.
#include <doctest/doctest.h>

#include <chrono>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "node_process.hpp"
#include "test_support.hpp"

using namespace ap;
using namespace std::chrono_literals;

namespace {

const std::string actorpipe = std::string(AP_BINARY_DIR) + "/cli/actorpipe";

nlohmann::json train(std::vector<std::string> args) {
  args.insert(args.begin(), {actorpipe, "train", "--model", "784-64-32-10", "--train-limit", "512", "--batch-size",
                             "64", "--max-steps", "6", "--threads", "1"});
  test::child_process p(args);
  const std::string line = p.read_line(120s);
  const int code = p.wait_exit(30s);
  INFO(p.stderr_text());
  REQUIRE(code == 0);
  return nlohmann::json::parse(line);
}

std::string refusal(std::vector<std::string> args) {
  args.insert(args.begin(), {actorpipe, "train", "--data", "/nonexistent-fashion-mnist"});
  test::child_process p(args);
  const int code = p.wait_exit(20s);
  CHECK(code != 0);
  CHECK(code != -1);  // exited (refused), not killed by the wait limit
  return p.stderr_text();
}

}  // namespace

TEST_CASE("train on a 2 x 2 mesh with clipping gives the single process's loss") {
  const auto single = train({"--clip-grad-norm", "0.5"});
  std::vector<std::string> args = {actorpipe, "train", "--model", "784-64-32-10", "--train-limit", "512",
                                   "--batch-size", "64", "--max-steps", "6", "--data-parallel", "2",
                                   "--tensor-parallel", "2", "--clip-grad-norm", "0.5"};
  test::child_process p(args);
  const std::string line = p.read_line(120s);
  INFO(p.stderr_text());
  REQUIRE(p.wait_exit(30s) == 0);
  const auto mesh = nlohmann::json::parse(line);
  CHECK(test::contains(p.stderr_text(), "mesh: 2 data-parallel replicas x 2 tensor-parallel ranks = 4 threads; "
                                        "split: 0 column_linear:784:64, 2 row_linear:64:32"));
  CHECK(mesh["data_parallel"] == 2);
  CHECK(mesh["tensor_parallel"] == 2);
  CHECK(mesh["last_epoch_mean_loss"].get<double>() == doctest::Approx(single["last_epoch_mean_loss"].get<double>()).epsilon(1e-5));
  CHECK(mesh["test_accuracy"].get<double>() == doctest::Approx(single["test_accuracy"].get<double>()).epsilon(1e-4));
}

TEST_CASE("D = 2 replicas on plain-TCP nodes: the ring by default (Note [collective backends]), gloo's loss bit for bit") {
  const auto single = train({});
  test::node_process a(actorpipe, {"--insecure"}), b(actorpipe, {"--insecure"});
  std::vector<nlohmann::json> runs;
  for (const char* backend : {"auto", "gloo"}) {
    CAPTURE(backend);
    test::child_process p({actorpipe, "train", "--model", "784-64-32-10", "--train-limit", "512", "--batch-size", "64",
                           "--max-steps", "6", "--stages", "1", "--microbatches", "2", "--data-parallel", "2",
                           "--nodes", a.address() + "," + b.address(), "--insecure", "--collectives", backend});
    const std::string line = p.read_line(120s);
    INFO(p.stderr_text());
    REQUIRE(p.wait_exit(30s) == 0);
    const std::string expected =
        std::string("collectives: ") +
        (std::string(backend) == "auto" ? "ring" : "gloo") +
        " (the replicas' all-reduces between nodes, plain TCP)";
    CHECK(test::contains(p.stderr_text(), expected));
    runs.push_back(nlohmann::json::parse(line));
  }
  CHECK(runs[0]["last_step_loss"].get<double>() == runs[1]["last_step_loss"].get<double>());
  CHECK(runs[0]["last_epoch_mean_loss"].get<double>() ==
        doctest::Approx(single["last_epoch_mean_loss"].get<double>()).epsilon(1e-5));
}

TEST_CASE("train on a D = 2 x P = 2 x T = 2 mesh with clipping gives the single process's loss") {
  const auto single = train({"--clip-grad-norm", "0.5"});
  std::vector<std::string> args = {actorpipe, "train", "--model", "784-64-32-10", "--train-limit", "512",
                                   "--batch-size", "64", "--max-steps", "6", "--stages", "2", "--microbatches", "2",
                                   "--layers-per-chunk", "3,2", "--data-parallel", "2", "--tensor-parallel", "2",
                                   "--clip-grad-norm", "0.5"};
  test::child_process p(args);
  const std::string line = p.read_line(120s);
  INFO(p.stderr_text());
  REQUIRE(p.wait_exit(30s) == 0);
  const auto mesh = nlohmann::json::parse(line);
  CHECK(test::contains(p.stderr_text(), "mesh: 2 data-parallel replicas x 2 stages x 2 tensor-parallel ranks = 8 "
                                        "compute ranks, all in this process"));
  CHECK(mesh["data_parallel"] == 2);
  CHECK(mesh["tensor_parallel"] == 2);
  CHECK(mesh["stages"] == 2);
  CHECK(mesh["last_epoch_mean_loss"].get<double>() == doctest::Approx(single["last_epoch_mean_loss"].get<double>()).epsilon(1e-5));
  CHECK(mesh["test_accuracy"].get<double>() == doctest::Approx(single["test_accuracy"].get<double>()).epsilon(1e-4));
}

TEST_CASE("bad meshes are refused before any data is read, naming the flag or the layer") {
  CHECK(test::contains(refusal({"--tensor-parallel", "3"}),
                       "ColumnParallelLinear(784->512) cannot split its 512 output columns over 3 tensor-parallel ranks"));
  CHECK(test::contains(refusal({"--data-parallel", "0"}), "--data-parallel: 0 is not a whole number from 1 to 256"));
  CHECK(test::contains(refusal({"--model", "784-10", "--tensor-parallel", "2"}), "has no Linear pair to split"));
}

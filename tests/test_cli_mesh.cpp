// `actorpipe train --data-parallel D --tensor-parallel T --clip-grad-norm X`: a real run of the program on
// Fashion-MNIST, the same result as one process, and bad meshes refused before any data is read.
#include <doctest/doctest.h>

#include <chrono>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli_runs.hpp"
#include "node_process.hpp"
#include "test_support.hpp"

using namespace ap;
using namespace std::chrono_literals;

namespace {

using test::actorpipe;

nlohmann::json train(std::vector<std::string> args) {
  args.insert(args.begin(), {"train", "--model", "784-64-32-10", "--train-limit", "512", "--batch-size", "64",
                             "--max-steps", "6", "--threads", "1"});
  return test::result_of(test::run_actorpipe(args));
}

std::string refusal(std::vector<std::string> args) {
  args.insert(args.begin(), {"train", "--data", "/nonexistent-fashion-mnist"});
  const test::program_run r = test::run_actorpipe(args);
  CHECK(r.code != 0);
  CHECK(r.code != -1);  // exited (refused), not killed by the wait limit
  return r.err;
}

}  // namespace

TEST_CASE("train on a 2 x 2 mesh with clipping gives the single process's loss") {
  const auto single = train({"--clip-grad-norm", "0.5"});
  const test::program_run p = test::run_actorpipe({"train", "--model", "784-64-32-10", "--train-limit", "512",
                                                  "--batch-size", "64", "--max-steps", "6", "--data-parallel", "2",
                                                  "--tensor-parallel", "2", "--clip-grad-norm", "0.5"});
  const nlohmann::json mesh = test::result_of(p);
  CHECK(test::contains(p.err, "mesh: 2 data-parallel replicas x 2 tensor-parallel ranks = 4 threads; "
                                        "split: 0 column_linear:784:64, 2 row_linear:64:32"));
  CHECK(mesh.at("data_parallel") == 2);
  CHECK(mesh.at("tensor_parallel") == 2);
  CHECK(mesh.at("last_epoch_mean_loss").get<double>() == doctest::Approx(single.at("last_epoch_mean_loss").get<double>()).epsilon(1e-5));
  CHECK(mesh.at("test_accuracy").get<double>() == doctest::Approx(single.at("test_accuracy").get<double>()).epsilon(1e-4));
}

TEST_CASE("D = 2 replicas on plain-TCP nodes: the ring by default (Note [collective backends]), gloo's loss bit for bit") {
  const auto single = train({});
  test::node_process a(actorpipe, {"--insecure"}), b(actorpipe, {"--insecure"});
  std::vector<nlohmann::json> runs;
  for (const char* backend : {"auto", "gloo"}) {
    CAPTURE(backend);
    const test::program_run p = test::run_actorpipe(
        {"train", "--model", "784-64-32-10", "--train-limit", "512", "--batch-size", "64", "--max-steps", "6",
         "--stages", "1", "--microbatches", "2", "--data-parallel", "2", "--nodes", a.address() + "," + b.address(),
         "--insecure", "--collectives", backend});
    runs.push_back(test::result_of(p));
    const std::string expected =
        std::string("collectives: ") +
        (std::string(backend) == "auto" ? "ring" : "gloo") +
        " (the replicas' all-reduces between nodes, plain TCP)";
    CHECK(test::contains(p.err, expected));
  }
  CHECK(runs[0].at("last_step_loss").get<double>() == runs[1].at("last_step_loss").get<double>());
  CHECK(runs[0].at("last_epoch_mean_loss").get<double>() ==
        doctest::Approx(single.at("last_epoch_mean_loss").get<double>()).epsilon(1e-5));
}

TEST_CASE("train on a D = 2 x P = 2 x T = 2 mesh with clipping gives the single process's loss") {
  const auto single = train({"--clip-grad-norm", "0.5"});
  const test::program_run p = test::run_actorpipe(
      {"train", "--model", "784-64-32-10", "--train-limit", "512", "--batch-size", "64", "--max-steps", "6", "--stages",
       "2", "--microbatches", "2", "--layers-per-chunk", "3,2", "--data-parallel", "2", "--tensor-parallel", "2",
       "--clip-grad-norm", "0.5"});
  const nlohmann::json mesh = test::result_of(p);
  CHECK(test::contains(p.err, "mesh: 2 data-parallel replicas x 2 stages x 2 tensor-parallel ranks = 8 "
                                        "compute ranks, all in this process"));
  CHECK(mesh.at("data_parallel") == 2);
  CHECK(mesh.at("tensor_parallel") == 2);
  CHECK(mesh.at("stages") == 2);
  CHECK(mesh.at("last_epoch_mean_loss").get<double>() == doctest::Approx(single.at("last_epoch_mean_loss").get<double>()).epsilon(1e-5));
  CHECK(mesh.at("test_accuracy").get<double>() == doctest::Approx(single.at("test_accuracy").get<double>()).epsilon(1e-4));
}

TEST_CASE("a GPT with --sequence-parallel on P = 2 x T = 2 stages, here and on nodes: the loss bit for bit, a smaller stash, predicted exactly") {
  std::vector<nlohmann::json> runs;
  for (bool sp : {false, true}) {
    std::vector<std::string> args = {"train", "--model", "gpt:layers=2,dim=32,heads=4,context=16", "--max-steps", "3",
                                     "--batch-size", "8", "--stages", "2", "--microbatches", "2", "--tensor-parallel", "2"};
    if (sp) args.push_back("--sequence-parallel");
    runs.push_back(test::result_of(test::run_actorpipe(args)));
  }
  {  // the same stages on two plain-TCP nodes: the option travels in the stages' options
    test::node_process a(actorpipe, {"--insecure"}), b(actorpipe, {"--insecure"});
    runs.push_back(test::result_of(test::run_actorpipe(
        {"train", "--model", "gpt:layers=2,dim=32,heads=4,context=16", "--max-steps", "3", "--batch-size", "8",
         "--stages", "2", "--microbatches", "2", "--tensor-parallel", "2", "--sequence-parallel", "--nodes",
         a.address() + "," + b.address(), "--insecure"})));
  }
  CHECK(runs[2].at("last_step_loss").get<double>() == runs[0].at("last_step_loss").get<double>());
  CHECK(runs[2].at("peak_stash_bytes") == runs[1].at("peak_stash_bytes"));
  CHECK_FALSE(runs[0].contains("sequence_parallel"));
  CHECK(runs[1].at("sequence_parallel") == true);
  // The same sums in the same order, only fewer rows on each rank between them (Note [sequence parallelism]).
  CHECK(runs[1].at("last_step_loss").get<double>() == runs[0].at("last_step_loss").get<double>());
  for (std::size_t s = 0; s < 2; ++s) {
    CAPTURE(s);
    CHECK(runs[1].at("peak_stash_bytes")[s].get<std::uint64_t>() < runs[0].at("peak_stash_bytes")[s].get<std::uint64_t>());
    CHECK(runs[1].at("peak_stash_bytes")[s] == runs[1].at("predicted_peak_stash_bytes")[s]);
  }
  CHECK(test::contains(refusal({"--model", "gpt:layers=1,dim=32,heads=4,context=16", "--sequence-parallel"}),
                       "--sequence-parallel divides rows over the tensor-parallel ranks: it needs --tensor-parallel 2"));
}

TEST_CASE("bad meshes are refused before any data is read, naming the flag or the layer") {
  CHECK(test::contains(refusal({"--tensor-parallel", "3"}),
                       "ColumnParallelLinear(784->512) cannot split its 512 output columns over 3 tensor-parallel ranks"));
  CHECK(test::contains(refusal({"--data-parallel", "0"}), "--data-parallel: 0 is not a whole number from 1 to 256"));
  CHECK(test::contains(refusal({"--model", "784-10", "--tensor-parallel", "2"}), "has no Linear pair to split"));
}

// Bad command lines are refused before any work, naming the flag and the value: negative counts (which once
// wrapped into huge unsigned numbers), pipeline-only flags without --stages, output paths that cannot be
// written; and a diverging run stops naming the step instead of ending "successfully" with a loss of 1e20.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <string>
#include <vector>

#include "node_process.hpp"
#include "schedule/schedule.hpp"
#include "cli_runs.hpp"
#include "test_support.hpp"

using namespace ap;
using namespace std::chrono_literals;

namespace {

using test::actorpipe;
// With this data folder, a command line that passed its checks would fail loading data instead: the
// refusals below come before any data is read (and so before any training).
const std::string no_data = "/nonexistent-fashion-mnist";

// Runs `actorpipe args...`, which must fail at once; returns its stderr.
std::string refusal(const std::vector<std::string>& args) {
  std::string line;
  for (const auto& a : args) line += a + " ";
  const test::program_run p = test::run_actorpipe(args);
  INFO(line << "\n" << p.err);
  CHECK(p.code != 0);
  CHECK(p.code != -1);
  CHECK(!test::contains(p.err, no_data));  // refused before reading data
  return p.err;
}

void check_refused(std::vector<std::string> args, const std::vector<std::string>& expected) {
  std::string line;
  for (const auto& a : args) line += a + " ";
  const std::string log = refusal(std::move(args));
  INFO(line << "\n" << log);
  for (const auto& e : expected) CHECK(test::contains(log, e));
}

}  // namespace

TEST_CASE("train refuses negative, zero and malformed numbers, naming the flag and the value") {
  const std::vector<std::vector<std::string>> cases = {
      {"--stages", "-1", "--stages: -1 is not a whole number from 0 to 4096"},
      {"--epochs", "-1", "--epochs: -1 is not a whole number >= 1"},
      {"--epochs", "0", "--epochs: 0 is not a whole number >= 1"},
      {"--batch-size", "-5", "--batch-size: -5 is not a whole number >= 1"},
      {"--max-steps", "-1", "--max-steps: -1 is not a whole number >= 0"},
      {"--train-limit", "-1", "--train-limit: -1 is not a whole number >= 0"},
      {"--checkpoint-every", "-2", "--checkpoint-every: -2 is not a whole number >= 0"},
      {"--seed", "-3", "--seed: -3 is not a whole number >= 0"},
      {"--init-seed", "1.5", "--init-seed: 1.5 is not a whole number >= 0"},
      {"--lr", "-0.1", "--lr: -0.1 is not a number > 0"},
      {"--lr", "nan", "--lr: nan is not a number > 0"},
      {"--momentum", "1.5", "--momentum: 1.5 is not a number >= 0 and < 1"},
      {"--weight-decay", "-1", "--weight-decay: -1 is not a number >= 0"},
      {"--beta1", "-0.1", "--beta1: -0.1 is not a number >= 0 and < 1"},
      {"--beta2", "1", "--beta2: 1 is not a number >= 0 and < 1"},
      {"--divergence-factor", "-1", "--divergence-factor: -1 is not a number >= 0"},
      {"--threads", "-1", "--threads"},
      {"--optimizer", "adamx", "--optimizer"},
      {"--activation", "relux", "--activation"},
      {"--dtype", "fp16", "--dtype: fp16 is not a dtype: expected fp32 or bf16"},
  };
  for (const auto& c : cases) check_refused({"train", "--data", no_data, c[0], c[1]}, {c[2]});
  // The model is built before any data is read, so a bad spec fails at once too.
  check_refused({"train", "--data", no_data, "--model", "784-x-10"}, {"bad spec '784-x-10'"});
}

TEST_CASE("train refuses bad pipeline values at parse time, with or without --stages") {
  for (const std::vector<std::string>& stages : {std::vector<std::string>{"--stages", "2"}, std::vector<std::string>{}}) {
    const auto with = [&](std::vector<std::string> args) {
      args.insert(args.begin(), stages.begin(), stages.end());
      args.insert(args.begin(), {"train", "--data", no_data});
      return args;
    };
    check_refused(with({"--timeout-ms", "0"}), {"--timeout-ms: 0 is not a whole number from 1 to 1000000000"});
    check_refused(with({"--timeout-ms", "-5"}), {"--timeout-ms: -5 is not a whole number"});
    check_refused(with({"--microbatches", "0"}), {"--microbatches: 0 is not a whole number from 1"});
    check_refused(with({"--microbatches", "-4"}), {"--microbatches: -4 is not a whole number"});
    check_refused(with({"--chunks", "0"}), {"--chunks: 0 is not a whole number"});
    check_refused(with({"--schedule", "nonsense"}), {"--schedule", "nonsense"});
    check_refused(with({"--partition", "nonsense"}), {"--partition", "nonsense"});
    check_refused(with({"--layers-per-chunk", "2,-1"}), {"--layers-per-chunk: -1 is not a whole number >= 1"});
  }
}

TEST_CASE("pipeline-only flags without --stages are refused, naming the flag") {
  const std::vector<std::vector<std::string>> cases = {
      {"--microbatches", "4"}, {"--schedule", "1f1b"},        {"--chunks", "2"},     {"--partition", "params"},
      {"--layers-per-chunk", "2,2"}, {"--timeout-ms", "500"}, {"--trace", "/tmp/t.json"}, {"--stage-log"},
  };
  for (auto c : cases) {
    const std::string flag = c[0];
    c.insert(c.begin(), {"train", "--data", no_data});
    check_refused(c, {flag + " needs --stages N (N >= 1): it only applies to a pipeline"});
    c.insert(c.end(), {"--stages", "0"});  // an explicit 0 is the single process too
    check_refused(c, {flag + " needs --stages"});
  }
  check_refused({"train", "--data", no_data, "--nodes", "127.0.0.1:1"}, {"--nodes", "--stages"});
  check_refused({"train", "--data", no_data, "--nodes", "127.0.0.1:1", "--stages", "0"}, {"--nodes needs --stages"});
}

TEST_CASE("--collectives: gloo and by-size beside mutual TLS are refused before any node is reached, an unknown backend too") {
  std::vector<std::string> args{"train", "--data", no_data, "--stages", "2", "--data-parallel", "2",
                                "--nodes", "127.0.0.1:1,127.0.0.1:2", "--collectives", "gloo"};
  for (const auto& f : test::transport_flags(test::tls_security())) args.push_back(f);
  check_refused(args, {"--collectives gloo: gloo runs over plain TCP only", "add --insecure"});
  *std::find(args.begin(), args.end(), "gloo") = "by-size";
  check_refused(args, {"--collectives by-size: gloo runs over plain TCP only", "add --insecure"});
  check_refused({"train", "--data", no_data, "--stages", "2", "--collectives", "mpi"}, {"--collectives", "mpi"});
}

TEST_CASE("output paths that cannot be written are refused before any work, naming the flag and the path") {
  test::scratch_dir dir{"cli_bad_input"};
  check_refused({"train", "--data", no_data, "--checkpoint", "/nonexistent/x"},
                {"--checkpoint /nonexistent/x: the folder /nonexistent does not exist"});
  check_refused({"train", "--data", no_data, "--stages", "2", "--trace", "/nonexistent/t.json"},
                {"--trace /nonexistent/t.json: the folder /nonexistent does not exist"});
  check_refused({"train", "--data", no_data, "--checkpoint", dir.path.string()}, {"--checkpoint", "is a folder"});
  check_refused({"schedule", "--svg", "/nonexistent/s.svg"}, {"--svg /nonexistent/s.svg: the folder /nonexistent does not exist"});
  check_refused({"schedule", "--csv", "/nonexistent/s.csv"}, {"--csv /nonexistent/s.csv: the folder /nonexistent does not exist"});
  // A writable folder passes (the run then fails on the missing data), and the probe file that tested it is gone.
  const test::program_run ok = test::run_actorpipe({"train", "--data", no_data, "--checkpoint", dir.file("x.safetensors")});
  CHECK(ok.code == 1);
  CHECK(test::contains(ok.err, no_data));
  CHECK(std::filesystem::is_empty(dir.path));
}

TEST_CASE("schedule and node refuse negative numbers, naming the flag") {
  check_refused({"schedule", "--stages", "-1"}, {"--stages: -1 is not a whole number from 1 to 1048576"});
  check_refused({"schedule", "--microbatches", "0"}, {"--microbatches: 0 is not a whole number"});
  check_refused({"schedule", "--chunks", "-2"}, {"--chunks: -2 is not a whole number"});
  check_refused({"schedule", "--forward-cost", "-1"}, {"--forward-cost: -1 is not a number >= 0"});
  check_refused({"schedule", "--schedule", "nonsense"}, {"--schedule", "nonsense"});
  check_refused({"node", "--port", "-1"}, {"--port: -1 is not a whole number from 0 to 65535"});
  check_refused({"node", "--port", "70000"}, {"--port: 70000 is not a whole number from 0 to 65535"});
}

TEST_CASE("a diverging run (Adam at lr 1e9) stops with an error naming the step") {
  const test::program_run train =
      test::run_actorpipe({"train", "--lr", "1e9", "--train-limit", "640", "--batch-size", "64", "--threads", "1"});
  const std::string& log = train.err;
  INFO(log);
  CHECK(train.code == 1);
  CHECK(test::contains(log, "error: step "));
  CHECK(test::contains(log, "the training diverge"));
  CHECK(train.lines.empty());  // no result line
}

TEST_CASE("a gpt model: bad specs name the key, text flags need a gpt model, a corpus too short for the context is refused") {
  check_refused({"train", "--model", "gpt:layers=0"}, {"key 'layers' must be a positive integer, got '0'"});
  check_refused({"train", "--model", "gpt:dim=64,heads=5"}, {"key 'heads' (5) must divide key 'dim' (64)"});
  check_refused({"train", "--model", "gpt:width=3"}, {"unknown key 'width'"});
  check_refused({"train", "--model", "784-10", "--text", "/tmp", "--data", no_data}, {"--text needs a gpt model"});
  check_refused({"train", "--model", "gpt", "--text", "/nonexistent-text"}, {"text corpus /nonexistent-text: no such file or folder"});
  check_refused({"train", "--model", "gpt:context=1000000", "--text", AP_BINARY_DIR "/CMakeCache.txt"},
                {"too short for the model's context 1000000", "key 'context'"});
  check_refused({"generate", "--checkpoint", "/nonexistent.safetensors"}, {"/nonexistent.safetensors"});
}

TEST_CASE("train --schedule-file: an invalid or mis-sized schedule is refused before any work, with the marked grid") {
  test::scratch_dir dir{"cli_schedule_file"};
  const std::string bad = dir.file("bad.grid"), good = dir.file("sync.csv");
  {
    std::ofstream(bad) << "0F0 0F1 0B0 0B1\n1F0 1B0 1B1 1F1\n";
    std::ofstream(good) << to_csv(make_sync_backward(2, 4));
  }
  check_refused({"train", "--data", no_data, "--stages", "2", "--microbatches", "2", "--schedule-file", bad},
                {"--schedule-file " + bad, "runs before its forward", "stage 1: 1F0 1B0 [1B1] 1F1  <-- ERROR HERE"});
  check_refused({"train", "--data", no_data, "--stages", "3", "--microbatches", "4", "--schedule-file", good},
                {"the schedule has 2 stages, the run --stages 3"});
  check_refused({"train", "--data", no_data, "--stages", "2", "--microbatches", "8", "--schedule-file", good},
                {"the schedule has 4 microbatches, the run --microbatches 8"});
  check_refused({"train", "--data", no_data, "--stages", "2", "--schedule", "1f1b", "--schedule-file", good},
                {"--schedule", "--schedule-file"});
  check_refused({"train", "--data", no_data, "--schedule-file", good}, {"--schedule-file needs --stages"});
  // A valid file passes every check (the run then fails on the missing data).
  const test::program_run ok = test::run_actorpipe({"train", "--data", no_data, "--stages", "2", "--microbatches", "4",
                                                   "--schedule-file", good});
  CHECK(ok.code == 1);
  CHECK(test::contains(ok.err, no_data));
}

TEST_CASE("`schedule --reduce --reduce-cost` adds the gradient reductions and simulates them on the lanes") {
  const test::program_run p =
      test::run_actorpipe({"schedule", "--schedule", "1f1b", "--stages", "2", "--microbatches", "4", "--reduce",
                           "--reduce-cost", "0.5"});
  std::string out;
  for (const std::string& line : p.lines) out += line + "\n";
  INFO(out);
  CHECK(p.code == 0);
  CHECK(test::contains(out, "0B3 0R\n"));
  CHECK(test::contains(out, "1B3 1R\n"));
  CHECK(test::contains(out, "makespan 15.5,"));  // 1F1B's 15 plus stage 0's last R, which nothing hides
  check_refused({"schedule", "--reduce-cost", "-1"}, {"--reduce-cost"});
}

// Elastic runs through the actorpipe program (Note [elastic runs] in engine/elastic_run.cpp): node processes over
// loopback, one killed for good mid-run; the run goes on with the nodes that answer from its last checkpoint,
// takes the node back when it answers again, and stops below --elastic MIN naming the checkpoint to resume from.
#include <doctest/doctest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "cli_runs.hpp"
#include "node_process.hpp"
#include "test_support.hpp"

using namespace ap;
using namespace std::chrono_literals;

namespace {

std::vector<std::string> joined(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// Waits until the metrics log holds step `step`'s line (a step taken; REQUIRE fails after 60 s, scaled).
void wait_for_step(const std::string& log, std::uint64_t step, test::child_process& run) {
  const auto reached = [&] {
    std::ifstream in(log);
    std::string line;
    while (std::getline(in, line)) {
      const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
      if (j.is_object() && j.contains("loss") && j.at("step").get<std::uint64_t>() >= step) return true;
    }
    return false;
  };
  const auto t0 = std::chrono::steady_clock::now();
  while (!reached() && run.running() && std::chrono::steady_clock::now() - t0 < test::scaled(60s))
    std::this_thread::sleep_for(10ms);
  REQUIRE_MESSAGE(reached(), run.stderr_text());
}

// The loss the elastic cases stage: `run` trains to step 8, `lose` takes a node away for good, the run trains to
// step 20 on the rest, then `add` brings a node; the finished run, its result compared with `expected`'s (the
// uninterrupted run's last loss, test accuracy and steps, bit for bit: the same batches in the same order, each
// step computed as the 3-stage pipeline computes it).
test::program_run lose_then_add(test::child_process& run, const std::string& steps_log, const nlohmann::json& expected,
                                const std::function<void()>& lose, const std::function<void()>& add) {
  wait_for_step(steps_log, 8, run);
  lose();
  wait_for_step(steps_log, 20, run);  // trained on the nodes left meanwhile
  add();
  test::program_run finished = test::finish(run);
  INFO(finished.err);
  test::check_same_fields(test::result_of(finished), expected, {"last_step_loss", "test_accuracy", "steps"});
  return finished;
}

// `count` node processes over plain TCP (the elastic cases' --insecure).
std::vector<std::unique_ptr<test::node_process>> insecure_nodes(int count) {
  std::vector<std::unique_ptr<test::node_process>> nodes;
  for (int n = 0; n < count; ++n)
    nodes.push_back(std::make_unique<test::node_process>(test::actorpipe, std::vector<std::string>{"--insecure"}));
  return nodes;
}

// `actorpipe ARGS...` (its metrics log at `steps_log`), `lose` called once it has trained step 8; the finished run.
test::program_run lose_at_step_8(const std::vector<std::string>& args, const std::string& steps_log,
                                 const std::function<void()>& lose) {
  test::child_process run(joined({test::actorpipe}, args));
  wait_for_step(steps_log, 8, run);
  lose();
  return test::finish(run);
}

std::string addresses(const std::vector<std::unique_ptr<test::node_process>>& nodes) {
  std::string out;
  for (const auto& n : nodes) out += (out.empty() ? "" : ",") + n->address();
  return out;
}

const std::vector<std::string> job = {"train", "--microbatches", "4", "--train-limit", "2048", "--epochs", "3",
                                      "--batch-size", "64", "--insecure", "--checkpoint-every", "5"};

}  // namespace

TEST_CASE("--elastic: a pipeline of 3 stages loses a node for good, goes on with 2 from the last checkpoint, and takes the node back when it answers: the uninterrupted run's losses") {
  test::scratch_dir dir{"cli_elastic_pipeline"};
  std::vector<std::unique_ptr<test::node_process>> nodes = insecure_nodes(3);
  const std::vector<std::string> args =
      joined(job, {"--stages", "3", "--nodes", addresses(nodes), "--elastic", "2", "--checkpoint", dir.file("run.safetensors"),
                   "--log", dir.file("steps.jsonl")});
  const nlohmann::json expected = test::result_of(test::run_actorpipe(args));
  CHECK(expected.at("elastic").empty());
  std::filesystem::remove(dir.file("steps.jsonl"));

  test::child_process run(joined({test::actorpipe}, args));
  const int port = nodes[2]->port();
  const test::program_run finished = lose_then_add(
      run, dir.file("steps.jsonl"), expected,
      [&] { nodes[2]->process().kill9(); },  // stage 2's node, for good until it is started again
      [&] { nodes[2] = std::make_unique<test::node_process>(test::actorpipe, std::vector<std::string>{"--insecure"}, port); });
  const std::string& log = finished.err;
  INFO(log);
  const nlohmann::json got = test::result_of(finished);
  const nlohmann::json& changes = got.at("elastic");
  REQUIRE(changes.size() == 2);
  CHECK(changes[0].at("old_mesh") == "1 x 3 x 1");
  CHECK(changes[0].at("new_mesh") == "1 x 2 x 1");
  CHECK(changes[0].at("nodes") == nlohmann::json({nodes[0]->address(), nodes[1]->address()}));
  CHECK(changes[0].at("step").get<int>() % 5 == 0);  // a checkpoint's step
  CHECK(test::contains(changes[0].at("why").get<std::string>(), "stage 2 on node 127.0.0.1:" + std::to_string(port)));
  CHECK(changes[1].at("old_mesh") == "1 x 2 x 1");
  CHECK(changes[1].at("new_mesh") == "1 x 3 x 1");
  CHECK(changes[1].at("why") == "127.0.0.1:" + std::to_string(port) + " now answers");
  CHECK(changes[1].at("step").get<int>() > changes[0].at("step").get<int>());
  for (const auto& c : changes) CHECK(c.at("seconds_lost").get<double>() >= 0.0);
  CHECK(got.at("stages") == 3);  // the mesh it ended on
  CHECK(test::contains(log, "2 of 3 nodes answer (" + nodes[0]->address() + ", " + nodes[1]->address() +
                                "): continuing from the checkpoint of step "));
  CHECK(test::contains(log, "elastic: 127.0.0.1:" + std::to_string(port) + " now answers; 3 of 3 nodes answer"));
}

TEST_CASE("--elastic: a listed node not up at the start: the run starts with the others, and takes it in at a checkpoint once it answers") {
  test::scratch_dir dir{"cli_elastic_join"};
  std::vector<std::unique_ptr<test::node_process>> nodes = insecure_nodes(2);
  const int late = test::free_port(1);
  const std::string late_address = "127.0.0.1:" + std::to_string(late);
  const std::vector<std::string> args =
      joined(job, {"--stages", "3", "--nodes", addresses(nodes) + "," + late_address, "--elastic", "2", "--checkpoint",
                   dir.file("run.safetensors"), "--log", dir.file("steps.jsonl")});
  test::child_process run(joined({test::actorpipe}, args));
  wait_for_step(dir.file("steps.jsonl"), 12, run);
  nodes.push_back(std::make_unique<test::node_process>(test::actorpipe, std::vector<std::string>{"--insecure"}, late));
  const test::program_run finished = test::finish(run);
  INFO(finished.err);
  const nlohmann::json got = test::result_of(finished);
  const nlohmann::json& changes = got.at("elastic");
  REQUIRE(changes.size() == 2);
  CHECK(changes[0].at("why") == late_address + " does not answer at the start");
  CHECK(changes[0].at("new_mesh") == "1 x 2 x 1");
  CHECK(changes[0].at("step") == 0);
  CHECK(changes[1].at("why") == late_address + " now answers");
  CHECK(changes[1].at("new_mesh") == "1 x 3 x 1");
  CHECK(got.at("stages") == 3);
  CHECK(got.at("steps") == 96);
  CHECK(test::contains(finished.err, "starting from step 0 on 1 x 2 x 1 (D x P x T) instead of 1 x 3 x 1"));
}

TEST_CASE("--elastic: two data-parallel replicas on two nodes, one lost for good: one replica goes on, the loss within a mesh's rounding of the uninterrupted one") {
  test::scratch_dir dir{"cli_elastic_replicas"};
  std::vector<std::unique_ptr<test::node_process>> nodes = insecure_nodes(2);
  const std::vector<std::string> args =
      joined(job, {"--stages", "1", "--data-parallel", "2", "--nodes", addresses(nodes), "--elastic", "1", "--checkpoint",
                   dir.file("run.safetensors"), "--log", dir.file("steps.jsonl")});
  const nlohmann::json expected = test::result_of(test::run_actorpipe(args));
  std::filesystem::remove(dir.file("steps.jsonl"));
  const test::program_run finished = lose_at_step_8(args, dir.file("steps.jsonl"), [&] { nodes[1]->process().kill9(); });
  INFO(finished.err);
  const nlohmann::json got = test::result_of(finished);
  REQUIRE(got.at("elastic").size() == 1);
  CHECK(got.at("elastic")[0].at("new_mesh") == "1 x 1 x 1");
  CHECK(got.at("steps") == expected.at("steps"));
  // One replica sums the batch's gradient in another order than two: the same training up to float rounding.
  CHECK(got.at("last_step_loss").get<double>() == doctest::Approx(expected.at("last_step_loss").get<double>()).epsilon(1e-4));
  CHECK(got.at("test_accuracy").get<double>() == doctest::Approx(expected.at("test_accuracy").get<double>()).epsilon(1e-3));
}

TEST_CASE("--elastic --auto: a node of the chosen mesh lost for good, the planner chooses again on the nodes left: the uninterrupted run's steps, its loss up to rounding") {
  test::scratch_dir dir{"cli_elastic_auto"};
  std::vector<std::unique_ptr<test::node_process>> nodes = insecure_nodes(3);
  const std::vector<std::string> training = {"train", "--train-limit", "2048", "--epochs", "3", "--batch-size", "64"};
  const nlohmann::json expected = test::result_of(test::run_actorpipe(training));  // one process
  const std::vector<std::string> args =
      joined(training, {"--auto", "--nodes", addresses(nodes), "--insecure", "--elastic", "1", "--checkpoint",
                        dir.file("run.safetensors"), "--checkpoint-every", "1", "--log", dir.file("steps.jsonl")});
  // Node 0 holds replica 0's first stage in every mesh the planner can choose. Steps of a few ms, but a checkpoint
  // after each keeps the run going for a second or more after it.
  const test::program_run finished = lose_at_step_8(args, dir.file("steps.jsonl"), [&] { nodes[0]->process().kill9(); });
  INFO(finished.err);
  const nlohmann::json got = test::result_of(finished);
  const nlohmann::json& changes = got.at("elastic");
  REQUIRE(changes.size() == 1);
  CHECK(changes[0].at("nodes") == nlohmann::json({nodes[1]->address(), nodes[2]->address()}));
  CHECK(test::contains(finished.err, "auto: on nodes " + nodes[1]->address() + " ("));  // planned again on them
  CHECK(test::contains(got.at("auto").at("choice").get<std::string>(), ", on "));
  CHECK(got.at("auto").at("nodes").get<int>() <= 2);
  CHECK(got.at("steps") == expected.at("steps"));
  // Another mesh sums in another order: the same training up to float rounding, which Adam can grow to a percent
  // of one step's loss by the run's end (seen: 0.412 against 0.405), so the last epoch's mean is compared.
  CHECK(got.at("last_epoch_mean_loss").get<double>() ==
        doctest::Approx(expected.at("last_epoch_mean_loss").get<double>()).epsilon(1e-2));
  CHECK(got.at("test_accuracy").get<double>() == doctest::Approx(expected.at("test_accuracy").get<double>()).epsilon(2e-2));
}

TEST_CASE("--elastic: below MIN nodes the run stops, naming the nodes left and the checkpoint, which resumes to the uninterrupted result") {
  test::scratch_dir dir{"cli_elastic_below"};
  std::vector<std::unique_ptr<test::node_process>> nodes = insecure_nodes(2);
  const std::string checkpoint = dir.file("run.safetensors");
  const std::vector<std::string> args =
      joined(job, {"--stages", "2", "--nodes", addresses(nodes), "--elastic", "2", "--checkpoint", checkpoint});
  const nlohmann::json expected = test::result_of(test::run_actorpipe(args));

  const int port = nodes[1]->port();
  const test::program_run stopped = lose_at_step_8(joined(args, {"--log", dir.file("steps.jsonl")}), dir.file("steps.jsonl"),
                                                   [&] { nodes[1]->process().kill9(); });
  INFO(stopped.err);
  CHECK(stopped.code == 1);
  CHECK(test::contains(stopped.err, "elastic: 1 of the 2 nodes answer (" + nodes[0]->address() + "), fewer than --elastic 2"));
  CHECK(test::contains(stopped.err, "the last checkpoint is " + checkpoint + " (step "));
  // The node back, the run resumed from that checkpoint ends where the uninterrupted one ends.
  nodes[1] = std::make_unique<test::node_process>(test::actorpipe, std::vector<std::string>{"--insecure"}, port);
  const nlohmann::json resumed = test::result_of(test::run_actorpipe(joined(args, {"--resume", checkpoint})));
  CHECK(resumed.at("last_step_loss") == expected.at("last_step_loss"));
  CHECK(resumed.at("test_accuracy") == expected.at("test_accuracy"));
}

TEST_CASE("--elastic refusals name what is wrong, before any work") {
  const auto refused = [](const std::vector<std::string>& args) {
    const test::program_run r = test::run_actorpipe(args, test::scaled(30s));
    CHECK(r.code != 0);
    CHECK(r.lines.empty());
    return r.err;
  };
  const std::vector<std::string> on_nodes = {"train", "--stages", "2", "--nodes", "127.0.0.1:1,127.0.0.1:2", "--insecure",
                                             "--elastic", "1"};
  CHECK(test::contains(refused(on_nodes), "--elastic continues from the run's last checkpoint: give --checkpoint PATH"));
  test::scratch_dir dir{"cli_elastic_refusals"};
  const std::vector<std::string> with_checkpoint = joined(on_nodes, {"--checkpoint", dir.file("run.safetensors")});
  CHECK(test::contains(refused(joined(with_checkpoint, {"--layers-per-chunk", "2,3"})),
                       "--elastic changes the stage count, which --layers-per-chunk fixes"));
  std::ofstream(dir.file("schedule.txt")) << "F0 F1 B1 B0\n";
  CHECK(test::contains(refused(joined(with_checkpoint, {"--schedule-file", dir.file("schedule.txt")})),
                       "--elastic changes the stage count, which --schedule-file fixes"));
  CHECK(test::contains(refused({"train", "--stages", "2", "--nodes", "127.0.0.1:1,127.0.0.1:2", "--insecure", "--elastic",
                                "3", "--checkpoint", dir.file("run.safetensors")}),
                       "--elastic 3 is more than the 2 nodes of --nodes"));
  CHECK(test::contains(refused({"train", "--stages", "2", "--elastic", "1"}),
                       "--elastic requires --nodes or --rendezvous env: it recovers from a lost node"));
}

TEST_CASE("--elastic under a rendezvous: a rank lost for good, the run goes on with 2 nodes, and a node that joins (node --join) is taken in at a checkpoint: the uninterrupted run's losses") {
  test::scratch_dir dir{"cli_elastic_joining"};
  std::vector<std::unique_ptr<test::node_process>> plain;
  for (int n = 0; n < 3; ++n) plain.push_back(std::make_unique<test::node_process>(test::actorpipe, std::vector<std::string>{"--insecure"}));
  const std::vector<std::string> run_args = {"--stages", "3", "--elastic", "2", "--checkpoint", dir.file("run.safetensors"),
                                            "--log", dir.file("steps.jsonl")};
  const nlohmann::json expected =
      test::result_of(test::run_actorpipe(joined(joined(job, run_args), {"--nodes", addresses(plain)})));
  plain.clear();
  std::filesystem::remove(dir.file("steps.jsonl"));

  const std::string master_port = std::to_string(test::free_port());
  const auto start = [&](int rank, const std::vector<std::string>& args) {
    std::vector<std::string> argv = {"/usr/bin/env", "RANK=" + std::to_string(rank), "WORLD_SIZE=4",
                                     "MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + master_port, test::actorpipe};
    return std::make_unique<test::child_process>(joined(argv, args));
  };
  std::vector<std::unique_ptr<test::child_process>> ranks;
  for (int rank = 1; rank <= 3; ++rank) ranks.push_back(start(rank, {"train", "--rendezvous", "env", "--insecure"}));
  auto coordinator = start(0, joined(joined(job, run_args), {"--rendezvous", "env"}));
  std::unique_ptr<test::child_process> joining;
  const test::program_run finished = lose_then_add(
      *coordinator, dir.file("steps.jsonl"), expected, [&] { ranks[2]->kill9(); },  // rank 3, stage 2's node
      [&] {
        joining = std::make_unique<test::child_process>(
            std::vector<std::string>{test::actorpipe, "node", "--join", "127.0.0.1:" + master_port, "--insecure"});
      });
  const std::string& log = finished.err;
  INFO(log);
  const nlohmann::json got = test::result_of(finished);
  const nlohmann::json& changes = got.at("elastic");
  REQUIRE(changes.size() == 2);
  CHECK(changes[0].at("new_mesh") == "1 x 2 x 1");
  CHECK(changes[1].at("new_mesh") == "1 x 3 x 1");
  REQUIRE(changes[1].at("nodes").size() == 3);
  const std::string joined_at = changes[1].at("nodes")[2].get<std::string>();
  CHECK(changes[1].at("why") == joined_at + " now answers");
  CHECK(test::contains(log, "rendezvous: a node joined at " + joined_at));
  CHECK(test::contains(log, "elastic: node " + joined_at + " joined the run"));
  for (int rank : {0, 1}) CHECK(ranks[static_cast<std::size_t>(rank)]->wait_exit(test::scaled(30s)) == 0);
  CHECK(joining->wait_exit(test::scaled(30s)) == 0);  // released with the job
  CHECK(test::contains(joining->stderr_text(), "rendezvous: the joining node registered as the node at " + joined_at));
  CHECK(test::contains(joining->stderr_text(), "rendezvous: the joining node: the job is over"));
}

TEST_CASE("a node joining a run that is not elastic is refused, naming why, and --join's address is checked") {
  const std::string master_port = std::to_string(test::free_port());
  test::child_process coordinator({"/usr/bin/env", "RANK=0", "WORLD_SIZE=2", "MASTER_ADDR=127.0.0.1",
                                   "MASTER_PORT=" + master_port, test::actorpipe, "train", "--rendezvous", "env",
                                   "--stages", "1", "--insecure"});
  test::child_process joining({test::actorpipe, "node", "--join", "127.0.0.1:" + master_port, "--insecure"});
  CHECK(joining.wait_exit(test::scaled(30s)) == 1);
  const std::string err = joining.stderr_text();
  CHECK_MESSAGE(test::contains(err, "rendezvous: the joining node: rank 0 (127.0.0.1:" + master_port +
                                        ") refused it: rank 0's run takes no joining node (it needs --elastic MIN)"),
                err);
  const test::program_run bad = test::run_actorpipe({"node", "--join", "127.0.0.1", "--insecure"}, test::scaled(30s));
  CHECK(bad.code != 0);
  CHECK(test::contains(bad.err, "is not host:port"));
}

// `actorpipe train --auto` (Note [automatic configuration], Note [auto trials]): it prints the best predicted
// configurations and the trials, trains with one and reports it; its trials leave the weights as they were
// (the run equals the chosen configuration run by hand, bit for bit); a budget is kept or refused; the flags it
// chooses are refused beside it; with --nodes it chooses a pipeline on real node processes (Note [auto on
// nodes]), trials included, and equals that pipeline run by hand.
#include <doctest/doctest.h>

#include <chrono>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli_runs.hpp"
#include "node_process.hpp"
#include "plan/cores.hpp"
#include "test_support.hpp"

using namespace ap;
using namespace std::chrono_literals;

namespace {

using test::actorpipe;
const std::vector<std::string> small_run = {"train", "--train-limit", "512", "--batch-size", "64", "--max-steps", "4"};

// `actorpipe ARGS...` to its end: its exit code, result (out) and stderr (err).
test::program_run run(const std::vector<std::string>& args) { return test::run_actorpipe(args); }

std::vector<std::string> with(std::vector<std::string> args, const std::vector<std::string>& more) {
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

// The flags that train the configuration --auto chose, by hand.
std::vector<std::string> chosen_flags(const nlohmann::json& a) {
  std::vector<std::string> flags = {"--threads", std::to_string(a.at("threads").get<int>()), "--data-parallel",
                                    std::to_string(a.at("data_parallel").get<int>()), "--tensor-parallel",
                                    std::to_string(a.at("tensor_parallel").get<int>())};
  if (a.at("stages").get<int>() == 0) return flags;
  std::string counts;
  for (const auto& c : a.at("layers_per_chunk")) counts += (counts.empty() ? "" : ",") + std::to_string(c.get<int>());
  return with(flags, {"--stages", std::to_string(a.at("stages").get<int>()), "--microbatches",
                      std::to_string(a.at("microbatches").get<int>()), "--schedule", a.at("schedule").get<std::string>(),
                      "--chunks", std::to_string(a.at("chunks").get<int>()), "--layers-per-chunk", counts});
}

}  // namespace

TEST_CASE("--auto prints its candidates and trials, trains with one, and equals that one run by hand") {
  const test::program_run chosen = run(with(small_run, {"--auto"}));
  INFO(chosen.err);
  REQUIRE(chosen.code == 0);
  CHECK(test::contains(chosen.err, "configurations fit"));
  CHECK(test::contains(chosen.err, "  1. "));
  CHECK(test::contains(chosen.err, "auto: tried 3: "));
  CHECK(test::contains(chosen.err, "auto: training with "));
  const nlohmann::json& a = chosen.out.at("auto");
  const std::string choice = a.at("choice");
  CHECK(test::contains(chosen.err, ". " + choice + "\n"));  // "auto: training with 2. <choice>"
  CHECK(a.at("predicted_step_s").get<double>() > 0.0);
  CHECK(a.at("measured_step_s").get<double>() > 0.0);
  CHECK(chosen.out.at("data_parallel") == a.at("data_parallel"));
  CHECK(chosen.out.at("tensor_parallel") == a.at("tensor_parallel"));
  CHECK(chosen.out.at("stages") == a.at("stages"));
  if (a.at("stages").get<int>() > 0) CHECK(chosen.out.at("layers_per_chunk") == a.at("layers_per_chunk"));

  // The trials ran on the model and put it back: the run is the chosen configuration's from the start.
  const test::program_run by_hand = run(with(small_run, chosen_flags(a)));
  INFO(by_hand.err);
  REQUIRE(by_hand.code == 0);
  CHECK(by_hand.out.at("last_step_loss") == chosen.out.at("last_step_loss"));
  CHECK(by_hand.out.at("test_accuracy") == chosen.out.at("test_accuracy"));
}

TEST_CASE("--auto --auto-trials 0 trains with the best predicted, and checks it after its first steps") {
  const test::program_run r = run({"train", "--train-limit", "1024", "--batch-size", "64", "--max-steps", "8", "--auto",
                            "--auto-trials", "0"});
  INFO(r.err);
  REQUIRE(r.code == 0);
  CHECK(!test::contains(r.err, "auto: tried"));
  CHECK(test::contains(r.err, "auto: after 6 steps: "));
  CHECK(test::contains(r.err, "auto: training with 1. " + r.out.at("auto").at("choice").get<std::string>()));
}

TEST_CASE("--auto keeps --max-memory: a budget one copy of the model fits and two do not, and one nothing fits") {
  // 784-512-256-10 with Adam: 535,818 parameters x 16 bytes = 8.6 MB, and a stash of its batch: one copy in this
  // process fits 12 MB, two replicas do not (Note [memory budget]).
  const test::program_run r = run(with(small_run, {"--auto", "--max-memory", "12M", "--auto-trials", "1"}));
  INFO(r.err);
  REQUIRE(r.code == 0);
  const nlohmann::json& a = r.out.at("auto");
  CHECK(a.at("data_parallel").get<int>() == 1);
  CHECK(a.at("predicted_peak_bytes").get<double>() <= 12.0 * 1024 * 1024);
  CHECK(test::contains(r.err, " cores and --max-memory 12.0 MB; predicted from "));

  const test::program_run none = run(with(small_run, {"--auto", "--max-memory", "1M"}));
  INFO(none.err);
  CHECK(none.code != 0);
  CHECK(test::contains(none.err, "--auto: no configuration on "));
  CHECK(test::contains(none.err, "fits --max-memory 1.0 MB: the least memory this process is predicted to hold is "));
}

TEST_CASE("the flags --auto chooses are refused beside it, and --auto-trials needs it") {
  for (const std::vector<std::string>& flag :
       {std::vector<std::string>{"--stages", "2"}, {"--threads", "1"}, {"--data-parallel", "2"}, {"--recompute", "blocks"},
        {"--tensor-parallel", "2"}, {"--microbatches", "4"}, {"--schedule", "1f1b"}, {"--partition", "time"},
        {"--schedule-file", "/nonexistent.schedule"}, {"--chunks", "2"}, {"--layers-per-chunk", "1,2"}}) {
    const test::program_run r = run(with({"train", "--data", "/nonexistent", "--auto"}, flag));
    INFO(r.err);
    CHECK(r.code != 0);
    CHECK(test::contains(r.err, flag[0] + " is chosen by --auto"));
  }
  const test::program_run r = run({"train", "--data", "/nonexistent", "--auto-trials", "2"});
  INFO(r.err);
  CHECK(r.code != 0);
  CHECK(test::contains(r.err, "--auto-trials requires --auto"));
}

TEST_CASE("--auto --nodes: a pipeline on the nodes, tried there, equal to it run by hand, and a budget per node") {
  test::node_process a(actorpipe, {"--insecure"}), b(actorpipe, {"--insecure"});
  const std::vector<std::string> nodes = {"--nodes", a.address() + "," + b.address(), "--insecure"};
  const test::program_run chosen = run(with(with(small_run, {"--auto"}), nodes));
  INFO(chosen.err);
  REQUIRE(chosen.code == 0);
  CHECK(test::contains(chosen.err, "auto: a message between processes: "));
  CHECK(test::contains(chosen.err, "configurations fit nodes " + a.address() + " ("));
  CHECK(test::contains(chosen.err, "auto: tried 3: "));
  const nlohmann::json& c = chosen.out.at("auto");
  CHECK(c.at("stages").get<int>() >= 1);  // the coordinator computes no layer
  const int used = c.at("nodes").get<int>();
  CHECK((used == 1 || used == 2));
  CHECK(test::contains(c.at("choice").get<std::string>(), ", on " + std::to_string(used) + " node"));
  // Both nodes on this machine share its cores (Note [cores on nodes]).
  CHECK(c.at("stages").get<int>() * c.at("data_parallel").get<int>() * c.at("tensor_parallel").get<int>() *
            c.at("threads").get<int>() <=
        static_cast<int>(process_cores().size()));

  // The trials on the nodes left the model as it was.
  const test::program_run by_hand = run(with(with(small_run, chosen_flags(c)), nodes));
  INFO(by_hand.err);
  REQUIRE(by_hand.code == 0);
  CHECK(by_hand.out.at("last_step_loss") == chosen.out.at("last_step_loss"));
  CHECK(by_hand.out.at("test_accuracy") == chosen.out.at("test_accuracy"));

  const test::program_run none = run(with(with(small_run, {"--auto", "--max-memory", "1M"}), nodes));
  INFO(none.err);
  CHECK(none.code != 0);
  CHECK(test::contains(none.err, "--auto: no configuration on 2 nodes fits --max-memory 1.0 MB per node: the least "
                                 "memory a node is predicted to hold is "));
}

// One command per process starts a whole job (Note [environment rendezvous]): `actorpipe train --rendezvous env`
// in 5 processes (rank 0 and 4 nodes) with torchrun's variables, and in 5 with Slurm's over mutual TLS, trains 4
// stages and every process exits 0; a node whose rank 0 is killed stops with an error instead of running on;
// bad command lines are refused.
#include <doctest/doctest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli_runs.hpp"
#include "node_process.hpp"
#include "test_support.hpp"

using namespace ap;
using namespace std::chrono_literals;

namespace {

using test::actorpipe;

// `env VARS... actorpipe ARGS...`
std::unique_ptr<test::child_process> start(const std::vector<std::string>& vars, const std::vector<std::string>& args) {
  std::vector<std::string> argv{"/usr/bin/env"};
  argv.insert(argv.end(), vars.begin(), vars.end());
  argv.push_back(actorpipe);
  argv.insert(argv.end(), args.begin(), args.end());
  return std::make_unique<test::child_process>(argv);
}

std::vector<std::string> join(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

const std::vector<std::string> job = {"train", "--rendezvous", "env", "--stages", "4", "--model", "784-32-32-32-10",
                                      "--train-limit", "512", "--batch-size", "64", "--max-steps", "3"};

}  // namespace

TEST_CASE("torchrun's variables: 5 processes, one command each, train 4 stages on the 4 nodes and all exit 0") {
  const std::string port = std::to_string(test::free_port());
  const auto vars = [&](int rank) {
    return std::vector<std::string>{"RANK=" + std::to_string(rank), "WORLD_SIZE=5", "MASTER_ADDR=127.0.0.1",
                                    "MASTER_PORT=" + port};
  };
  std::vector<std::unique_ptr<test::child_process>> nodes;
  for (int rank : {4, 2, 3, 1}) nodes.push_back(start(vars(rank), join(job, {"--insecure"})));  // first: they retry
  auto coordinator = start(vars(0), join(job, {"--insecure"}));
  const std::string line = coordinator->read_line(test::scaled(120s));
  CHECK(coordinator->wait_exit(test::scaled(30s)) == 0);
  for (auto& n : nodes) CHECK(n->wait_exit(test::scaled(30s)) == 0);
  const std::string log = coordinator->stderr_text();
  INFO(log << "\n--- node 4:\n" << nodes[0]->stderr_text());
  REQUIRE(!line.empty());
  const auto out = nlohmann::json::parse(line);
  CHECK(out.at("stages") == 4);
  CHECK(out.at("steps") == 3);
  CHECK(test::contains(log, "rendezvous: rank 0 of 5 (from RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT)"));
  CHECK(test::contains(log, "rendezvous: 4 nodes registered: 127.0.0.1:"));
  CHECK(test::contains(nodes[3]->stderr_text(), "node: stage 0 started"));  // rank 1: the first stage
  CHECK(test::contains(nodes[0]->stderr_text(), "node: stage 3 started"));  // rank 4: the last
  for (auto& n : nodes) CHECK(test::contains(n->stderr_text(), ": the job is over"));
}

TEST_CASE("--auto under a rendezvous: rank 0 chooses the pipeline on the nodes that registered (Note [auto on nodes])") {
  const std::string port = std::to_string(test::free_port());
  const auto vars = [&](int rank) {
    return std::vector<std::string>{"RANK=" + std::to_string(rank), "WORLD_SIZE=3", "MASTER_ADDR=127.0.0.1",
                                    "MASTER_PORT=" + port};
  };
  const std::vector<std::string> auto_job = {"train", "--rendezvous", "env", "--auto", "--model", "784-32-32-32-10",
                                             "--train-limit", "512", "--batch-size", "64", "--max-steps", "3", "--insecure"};
  std::vector<std::unique_ptr<test::child_process>> nodes;
  for (int rank : {1, 2}) nodes.push_back(start(vars(rank), auto_job));
  auto coordinator = start(vars(0), auto_job);
  const std::string line = coordinator->read_line(test::scaled(120s));
  CHECK(coordinator->wait_exit(test::scaled(30s)) == 0);
  for (auto& n : nodes) CHECK(n->wait_exit(test::scaled(30s)) == 0);  // the trials did not end the job
  const std::string log = coordinator->stderr_text();
  INFO(log);
  REQUIRE(!line.empty());
  const auto out = nlohmann::json::parse(line);
  CHECK(out.at("steps") == 3);
  CHECK(out.at("auto").at("stages").get<int>() >= 1);
  CHECK(out.at("auto").at("nodes").get<int>() >= 1);
  CHECK(test::contains(log, "configurations fit nodes 127.0.0.1:"));
  CHECK(test::contains(log, "auto: training with "));
}

TEST_CASE("Slurm's variables over mutual TLS: 5 processes, the first host of the node list is rank 0's") {
  const std::string port = std::to_string(test::free_port());
  const auto vars = [&](int rank) {
    return std::vector<std::string>{"SLURM_PROCID=" + std::to_string(rank), "SLURM_NTASKS=5",
                                    "SLURM_STEP_NODELIST=localhost,gpu[02-05]", "MASTER_PORT=" + port};
  };
  std::vector<std::unique_ptr<test::child_process>> nodes;
  for (int rank = 1; rank <= 4; ++rank)
    nodes.push_back(start(vars(rank), join(job, test::transport_flags(test::tls_security("node")))));
  auto coordinator = start(vars(0), join(job, test::transport_flags(test::tls_security("coordinator"))));
  const std::string line = coordinator->read_line(test::scaled(120s));
  CHECK(coordinator->wait_exit(test::scaled(30s)) == 0);
  for (auto& n : nodes) CHECK(n->wait_exit(test::scaled(30s)) == 0);
  INFO(coordinator->stderr_text() << "\n--- node 1:\n" << nodes[0]->stderr_text());
  REQUIRE(!line.empty());
  CHECK(nlohmann::json::parse(line).at("steps") == 3);
  CHECK(test::contains(nodes[0]->stderr_text(), "rank 0 at localhost:" + port));
  CHECK(test::contains(nodes[0]->stderr_text(), "mutual TLS"));
}

TEST_CASE("a node listens on MASTER_PORT + its rank, or where that is taken on a free port, saying so") {
  // Rank 2 takes MASTER_PORT + 2; MASTER_PORT + 1 is held here by another listener, so rank 1 takes a free port, says
  // why, and the job still trains on both (Note [restart under a rendezvous]).
  const int master = test::free_port();
  const int taken = master + 1;
  const int holder = socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(holder >= 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<std::uint16_t>(taken));
  REQUIRE(bind(holder, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  REQUIRE(listen(holder, 4) == 0);
  const auto vars = [&](int rank) {
    return std::vector<std::string>{"RANK=" + std::to_string(rank), "WORLD_SIZE=3", "MASTER_ADDR=127.0.0.1",
                                    "MASTER_PORT=" + std::to_string(master)};
  };
  const std::vector<std::string> two_stages = {"train", "--rendezvous", "env", "--stages", "2", "--model", "784-32-10",
                                               "--train-limit", "256", "--batch-size", "64", "--max-steps", "2",
                                               "--insecure"};
  std::vector<std::unique_ptr<test::child_process>> nodes;
  for (int rank : {1, 2}) nodes.push_back(start(vars(rank), two_stages));
  auto coordinator = start(vars(0), two_stages);
  const test::program_run job = test::finish(*coordinator);
  close(holder);
  const std::string one = nodes[0]->stderr_text(), two = nodes[1]->stderr_text();
  INFO(job.err << "\n--- rank 1:\n" << one << "\n--- rank 2:\n" << two);
  CHECK(test::result_of(job).at("steps") == 2);
  for (auto& n : nodes) CHECK(n->wait_exit(test::scaled(30s)) == 0);
  CHECK(test::contains(one, "node: port " + std::to_string(taken) + " is taken: "));
  CHECK(test::contains(one, "; listening on a free one instead (a restart of this node would not find it there)"));
  CHECK_FALSE(test::contains(one, "registered as the node at 127.0.0.1:" + std::to_string(taken) + "\n"));
  CHECK(test::contains(one, "rendezvous: rank 1 registered as the node at 127.0.0.1:"));
  CHECK(test::contains(two, "rendezvous: rank 2 registered as the node at 127.0.0.1:" + std::to_string(master + 2) + "\n"));
  CHECK_FALSE(test::contains(two, " is taken"));
}

TEST_CASE("a node whose rank 0 is killed stops with an error instead of running on") {
  const std::string port = std::to_string(test::free_port());
  const auto vars = [&](int rank) {
    return std::vector<std::string>{"RANK=" + std::to_string(rank), "WORLD_SIZE=2", "MASTER_ADDR=127.0.0.1",
                                    "MASTER_PORT=" + port};
  };
  // Short epochs, many of them: its first epoch line comes within a second however loaded the machine (a whole
  // Fashion-MNIST epoch took over a minute beside a build under ctest -j3), and it trains on until killed.
  const std::vector<std::string> long_job = {"train", "--rendezvous", "env", "--stages", "1", "--train-limit", "512",
                                             "--epochs", "1000000", "--insecure"};
  auto node = start(vars(1), long_job);
  auto coordinator = start(vars(0), long_job);
  // Wait until it trains (its epoch line), then kill it.
  const auto deadline = std::chrono::steady_clock::now() + test::scaled(60s);
  while (!test::contains(coordinator->stderr_text(), "epoch 1:") && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(100ms);
  REQUIRE_MESSAGE(test::contains(coordinator->stderr_text(), "epoch 1:"), coordinator->stderr_text());
  coordinator->kill9();
  CHECK(node->wait_exit(test::scaled(30s)) == 1);
  INFO(node->stderr_text());
  CHECK(test::contains(node->stderr_text(),
                       "rendezvous: rank 1: rank 0 (127.0.0.1:" + port + ") went away without ending the job"));
}

TEST_CASE("--rendezvous refusals name what is wrong") {
  const auto refused = [](const std::vector<std::string>& vars, const std::vector<std::string>& args) {
    auto p = start(vars, args);
    const int code = p->wait_exit(test::scaled(20s));
    CHECK(code != 0);
    return p->stderr_text();
  };
  const std::vector<std::string> rank0 = {"RANK=0", "WORLD_SIZE=2", "MASTER_ADDR=127.0.0.1", "MASTER_PORT=1"};
  CHECK(test::contains(refused({"RANK=", "SLURM_PROCID="}, {"train", "--rendezvous", "env", "--stages", "1", "--insecure"}),
                       "neither torchrun's variables"));
  CHECK(test::contains(refused(rank0, {"train", "--rendezvous", "env", "--insecure"}),
                       "rank 0 trains a pipeline on the other ranks: it needs --stages N"));
  CHECK(test::contains(refused(rank0, {"train", "--rendezvous", "env", "--stages", "1", "--nodes", "127.0.0.1:1"}),
                       "--nodes excludes --rendezvous"));
  CHECK(test::contains(refused({}, {"train", "--insecure"}), "--insecure requires --nodes or --rendezvous env"));
  CHECK(test::contains(refused({}, {"train", "--stages", "2", "--restart-on-failure", "1"}),
                       "--restart-on-failure requires --nodes or --rendezvous env: it recovers from a lost node"));
  CHECK(test::contains(refused(rank0, {"node", "--rendezvous", "env", "--insecure"}),
                       "rank 0 is the coordinator; start `train --rendezvous env` there"));
  CHECK(test::contains(refused({"RANK=1", "WORLD_SIZE=2", "MASTER_ADDR=127.0.0.1"},
                               {"node", "--rendezvous", "env", "--insecure"}),
                       "MASTER_PORT is not set"));
}

TEST_CASE("restart under a rendezvous (--restart-on-failure): a node killed mid-run and started again with its variables, the same result") {
  // The restarted rank listens where it did (MASTER_PORT + rank), registers
  // again, and the coordinator's recovery finds it there (Note [restart under a rendezvous]).
  const std::vector<std::string> long_job = {"train", "--rendezvous", "env", "--stages", "2", "--microbatches", "4",
                                             "--train-limit", "2048", "--epochs", "6", "--batch-size", "64",
                                             "--restart-on-failure", "1", "--restart-wait-ms", "20000",
                                             "--snapshot-every", "7", "--insecure"};
  const auto run_job = [&](bool kill_one) {
    const std::string port = std::to_string(test::free_port());
    const auto vars = [&](int rank) {
      return std::vector<std::string>{"RANK=" + std::to_string(rank), "WORLD_SIZE=3", "MASTER_ADDR=127.0.0.1",
                                      "MASTER_PORT=" + port};
    };
    std::vector<std::unique_ptr<test::child_process>> nodes;
    for (int rank : {1, 2}) nodes.push_back(start(vars(rank), long_job));
    auto coordinator = start(vars(0), long_job);
    if (kill_one) {
      const auto t0 = std::chrono::steady_clock::now();
      const auto placed = [&] { return test::contains(coordinator->stderr_text(), "stage 1: predicted busy"); };
      while (!placed() && std::chrono::steady_clock::now() - t0 < test::scaled(30s)) std::this_thread::sleep_for(5ms);
      REQUIRE_MESSAGE(placed(), coordinator->stderr_text());
      std::this_thread::sleep_for(200ms);  // some steps in
      nodes[1]->kill9();                   // rank 2: stage 1
      nodes.push_back(start(vars(2), long_job));  // as a launcher restarting it would
    }
    const test::program_run job = test::finish(*coordinator);
    const std::string& log = job.err;
    INFO(log);
    const nlohmann::json result = test::result_of(job);
    for (std::size_t n = 0; n < nodes.size(); ++n)
      if (!(kill_one && n == 1)) CHECK(nodes[n]->wait_exit(test::scaled(30s)) == 0);  // the job's end reached them
    if (kill_one) {
      CHECK(test::contains(log, "rendezvous: rank 2 registered again at 127.0.0.1:" + std::to_string(std::stoi(port) + 2) +
                                    " (restarted: a recovery finds it there)"));
      CHECK(test::contains(log, "recovery 1 of 1: "));
    }
    CHECK(result.at("restarts") == (kill_one ? 1 : 0));
    return result;
  };
  const nlohmann::json expected = run_job(false);
  const nlohmann::json got = run_job(true);
  test::check_same_fields(got, expected, {"last_epoch_mean_loss", "last_step_loss", "test_accuracy", "steps"});
}

TEST_CASE("a rank fails fast (Note [rendezvous fails fast]): what it can check before waiting, and its wait's expiry names the address") {
  const std::string port = std::to_string(test::free_port());
  const auto vars = [&](int rank, const std::string& master) {
    return std::vector<std::string>{"RANK=" + std::to_string(rank), "WORLD_SIZE=2", "MASTER_ADDR=" + master,
                                    "MASTER_PORT=" + port};
  };
  // Each within seconds, where a wait would take the default 120 s.
  const auto failed = [](std::unique_ptr<test::child_process> p) {
    const int code = p->wait_exit(test::scaled(20s));
    CHECK(code > 0);  // -1: still waiting
    return p->stderr_text();
  };
  const std::vector<std::string> node_job = {"train", "--rendezvous", "env", "--insecure"};
  CHECK(test::contains(failed(start(vars(1, "no-such-host.invalid"), node_job)),
                       "rendezvous: rank 1: MASTER_ADDR 'no-such-host.invalid' (from RANK, WORLD_SIZE, MASTER_ADDR, "
                       "MASTER_PORT) does not resolve"));
  CHECK(test::contains(failed(start(vars(1, "no-such-host.invalid"), {"node", "--rendezvous", "env", "--insecure"})),
                       "MASTER_ADDR 'no-such-host.invalid'"));
  // No transport security: refused before waiting for rank 0, as rank 0 refuses it.
  CHECK(test::contains(failed(start(vars(1, "127.0.0.1"), {"train", "--rendezvous", "env"})),
                       "train --rendezvous env (rank 1): no transport security given"));
  CHECK(test::contains(failed(start(vars(1, "127.0.0.1"), {"node", "--rendezvous", "env"})),
                       "node --rendezvous env: no transport security given"));
  // Rank 0 checks its configuration before waiting for the nodes.
  CHECK(test::contains(failed(start(vars(0, "127.0.0.1"), {"train", "--rendezvous", "env", "--stages", "1", "--insecure",
                                                            "--checkpoint", "/nonexistent-folder/run.safetensors"})),
                       "--checkpoint"));
  // --rendezvous-timeout: the wait, and its expiry names the address waited at.
  CHECK(test::contains(failed(start(vars(1, "127.0.0.1"), join(node_job, {"--rendezvous-timeout", "1"}))),
                       "rendezvous: rank 1 could not reach rank 0 at 127.0.0.1:" + port +
                           " (from RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) within 1 s (--rendezvous-timeout)"));
  CHECK(test::contains(failed(start(vars(1, "127.0.0.1"), {"node", "--rendezvous", "env", "--insecure",
                                                            "--rendezvous-timeout", "1"})),
                       "within 1 s (--rendezvous-timeout)"));
  CHECK(test::contains(failed(start(vars(0, "127.0.0.1"), {"train", "--rendezvous", "env", "--stages", "1", "--insecure",
                                                            "--rendezvous-timeout", "1"})),
                       "rendezvous: rank 0 waited 1 s (--rendezvous-timeout) at 127.0.0.1:" + port +
                           " (MASTER_ADDR:MASTER_PORT) for 1 node; 0 registered, rank 1 did not"));
  CHECK(test::contains(failed(start({}, {"train", "--rendezvous-timeout", "5"})),
                       "--rendezvous-timeout requires --rendezvous env"));
  CHECK(test::contains(failed(start({}, {"node", "--insecure", "--rendezvous-timeout", "5"})),
                       "--rendezvous-timeout requires --rendezvous env"));
  CHECK(test::contains(failed(start(vars(1, "127.0.0.1"), join(node_job, {"--rendezvous-timeout", "0"}))),
                       "--rendezvous-timeout"));
}

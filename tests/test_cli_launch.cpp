// `actorpipe launch --hostfile` (Note [launch over ssh]) with scripts/local_ssh.sh standing in for ssh: a
// 5-process job (rank 0 and 4 nodes) trains 4 stages from one command and every process exits 0, each rank's
// lines prefixed; a failing rank 0 ends the job at once with its status; hostfiles are read as mpirun writes
// them and bad ones refused by line.
#include <doctest/doctest.h>
#include <sys/stat.h>

#include <chrono>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli_runs.hpp"
#include "network/hostfile.hpp"
#include "node_process.hpp"
#include "test_support.hpp"

using namespace ap;
using namespace std::chrono_literals;

namespace {

using test::actorpipe;
const std::string local_ssh = std::string(AP_SOURCE_DIR) + "/scripts/local_ssh.sh";

std::string hostfile(test::scratch_dir& dir, const std::string& text) {
  const std::string path = dir.file("hosts");
  std::ofstream(path) << text;
  return path;
}

}  // namespace

TEST_CASE("hostfiles: host, host slots=N, host:N, comments, refusals name the line") {
  const auto hosts = parse_hostfile("# the job\nnode1 slots=2\n\nnode2:3   # gpus\nnode3\n", "hosts");
  REQUIRE(hosts.size() == 3);
  CHECK(hosts[0].host == "node1");
  CHECK(hosts[0].slots == 2);
  CHECK(hosts[1].host == "node2");
  CHECK(hosts[1].slots == 3);
  CHECK(hosts[2].slots == 1);
  CHECK(rank_hosts(hosts) == std::vector<std::string>{"node1", "node1", "node2", "node2", "node2", "node3"});
  CHECK(test::contains(test::error_of([] { parse_hostfile("a\nb slots=0\n", "h"); }),
                       "h line 2: the slot count must be a whole number from 1 to 4096, got '0'"));
  CHECK(test::contains(test::error_of([] { parse_hostfile("a max_slots=2\n", "h"); }), "h line 1: unknown 'max_slots=2'"));
  CHECK(test::contains(test::error_of([] { parse_hostfile("a\na\n", "h"); }), "h line 2: host a is listed twice"));
  CHECK(test::contains(test::error_of([] { parse_hostfile("# nothing\n", "h"); }), "h: no host in it"));
}

TEST_CASE("one launch command: 5 processes (rank 0 and 4 nodes) train 4 stages and all exit 0") {
  test::scratch_dir dir{"cli_launch"};
  test::child_process launch({actorpipe, "launch", "--hostfile", hostfile(dir, "localhost slots=5\n"), "--ssh",
                              local_ssh, "--master-port", std::to_string(test::free_port()), "--", "train", "--stages",
                              "4", "--model", "784-64-64-64-10", "--train-limit", "512", "--batch-size", "64",
                              "--max-steps", "3", "--insecure"});
  const std::string line = launch.read_line(test::scaled(120s));
  CHECK(launch.wait_exit(test::scaled(60s)) == 0);
  const std::string log = launch.stderr_text();
  INFO(log);
  REQUIRE(!line.empty());
  const auto out = nlohmann::json::parse(line);  // rank 0's stdout, unprefixed
  CHECK(out.at("stages") == 4);
  CHECK(out.at("steps") == 3);
  CHECK(test::contains(log, "launch: 5 ranks on "));
  CHECK(test::contains(log, "[localhost rank 0] rendezvous: 4 nodes registered"));
  for (int r = 1; r <= 4; ++r) {
    CHECK(test::contains(log, "[localhost rank " + std::to_string(r) + "] rendezvous: rank " + std::to_string(r) +
                                  ": the job is over"));
    CHECK(test::contains(log, "[localhost rank " + std::to_string(r) + "] node: stage " + std::to_string(r - 1) +
                                  " started"));
  }
  CHECK(test::contains(log, "launch: all 5 ranks exited 0"));
}

TEST_CASE("a rank 0 that fails ends the launch at once with its status, bad commands are refused") {
  test::scratch_dir dir{"cli_launch_fail"};
  const std::string hosts = hostfile(dir, "localhost slots=3\n");
  const auto started = std::chrono::steady_clock::now();
  // This --data folder does not exist: rank 0 fails after the rendezvous, while its nodes wait for it.
  test::child_process launch({actorpipe, "launch", "--hostfile", hosts, "--ssh", local_ssh, "--master-port",
                              std::to_string(test::free_port()), "--", "train", "--stages", "2", "--data",
                              "/nonexistent-data", "--insecure"});
  const int code = launch.wait_exit(test::scaled(60s));
  const std::string log = launch.stderr_text();
  INFO(log);
  CHECK(code == 1);
  CHECK(test::contains(log, "launch: rank 0 on localhost exited 1"));
  CHECK(std::chrono::steady_clock::now() - started < test::scaled(30s));  // nodes not left to retry for minutes

  const auto refused = [&](const std::vector<std::string>& command) {
    std::vector<std::string> argv = {actorpipe, "launch", "--hostfile", hosts, "--ssh", local_ssh, "--"};
    argv.insert(argv.end(), command.begin(), command.end());
    test::child_process p(argv);
    CHECK(p.wait_exit(test::scaled(20s)) != 0);
    return p.stderr_text();
  };
  CHECK(test::contains(refused({"schedule", "--stages", "2"}), "the command after -- must be `train ...`"));
  CHECK(test::contains(refused({"train", "--stages", "2", "--nodes", "h:1"}), "leave --nodes out of the command"));
  const std::string one = hostfile(dir, "localhost\n");
  test::child_process single({actorpipe, "launch", "--hostfile", one, "--", "train", "--stages", "1"});
  CHECK(single.wait_exit(test::scaled(20s)) != 0);
  CHECK(test::contains(single.stderr_text(), "gives 1 slot: a job needs rank 0 and at least one node"));
}

TEST_CASE("launch --program runs that binary on the hosts, and exits with a failed node's status when rank 0 succeeds") {
  // Note [launch over ssh]: the exit status is rank 0's, or, rank 0 having exited 0, the first failed node's. The
  // program here stands in for actorpipe on the hosts: it runs actorpipe, says so, and as rank 2 then exits 7.
  test::scratch_dir dir{"cli_launch_program"};
  const std::string program = dir.file("actorpipe-on-hosts");
  std::ofstream(program) << "#!/bin/sh\n"
                         << "echo \"the program given to launch, as rank $RANK\" >&2\n"
                         << "'" << actorpipe << "' \"$@\"\n"
                         << "status=$?\n"
                         << "if [ \"$RANK\" = 2 ]; then exit 7; fi\n"
                         << "exit $status\n";
  REQUIRE(chmod(program.c_str(), 0755) == 0);
  const test::program_run launch = test::run_program(
      {actorpipe, "launch", "--hostfile", hostfile(dir, "localhost slots=3\n"), "--ssh", local_ssh, "--master-port",
       std::to_string(test::free_port()), "--program", program, "--", "train", "--stages", "2", "--model", "784-32-10",
       "--train-limit", "256", "--batch-size", "64", "--max-steps", "2", "--insecure"});
  const std::string& log = launch.err;
  INFO(log);
  CHECK(launch.code == 7);
  REQUIRE(launch.out.is_object());  // rank 0 trained and printed its result
  CHECK(launch.out.at("steps") == 2);
  for (int r = 0; r < 3; ++r)
    CHECK(test::contains(log, "[localhost rank " + std::to_string(r) + "] the program given to launch, as rank " +
                                  std::to_string(r)));
  CHECK(test::contains(log, "[localhost rank 2] rendezvous: rank 2: the job is over"));
  CHECK(test::contains(log, "launch: rank 2 on localhost exited 7"));
  CHECK_FALSE(test::contains(log, "launch: rank 0 on localhost exited"));
  CHECK_FALSE(test::contains(log, "launch: rank 1 on localhost exited"));
  CHECK_FALSE(test::contains(log, "ranks exited 0"));
}

TEST_CASE("actorpipe certs, then launch --certs: the job runs over mutual TLS with the certificates it made") {
  test::scratch_dir dir{"cli_launch_certs"};
  const std::string certs = dir.file("certs");
  test::child_process make({actorpipe, "certs", "--out", certs, "localhost"});
  const std::string said = make.read_line(test::scaled(30s));
  REQUIRE(make.wait_exit(test::scaled(30s)) == 0);
  CHECK(test::contains(said, "a new CA"));
  CHECK(test::contains(said, "coordinator.pem, localhost.pem"));
  test::child_process launch({actorpipe, "launch", "--hostfile", hostfile(dir, "localhost slots=3\n"), "--ssh",
                              local_ssh, "--master-port", std::to_string(test::free_port()), "--certs", certs, "--", "train",
                              "--stages", "2", "--model", "784-32-10", "--train-limit", "256", "--batch-size", "64",
                              "--max-steps", "2"});
  const std::string line = launch.read_line(test::scaled(120s));
  CHECK(launch.wait_exit(test::scaled(60s)) == 0);
  const std::string log = launch.stderr_text();
  INFO(log);
  REQUIRE(!line.empty());
  CHECK(nlohmann::json::parse(line).at("steps") == 2);
  CHECK(test::contains(log, "[localhost rank 1] node: mutual TLS"));
  CHECK(!test::contains(log, "--insecure"));
}

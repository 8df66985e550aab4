// `actorpipe launch --hostfile` (Note [launch over ssh]) with scripts/local_ssh.sh standing in for ssh: a
// 5-process job (rank 0 and 4 nodes) trains 4 stages from one command and every process exits 0, each rank's
// lines prefixed; a failing rank 0 ends the job at once with its status; hostfiles are read as mpirun writes
// them and bad ones refused by line.
#include <doctest/doctest.h>
#include <sys/stat.h>

#include <chrono>
#include <filesystem>
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
  // The exit status is rank 0's, or, rank 0 having exited 0, the first failed node's (Note [launch over ssh]). The
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

TEST_CASE("hostfile hosts are host names (RFC 1123) or IP addresses, anything else is refused by file and line") {
  const auto hosts = parse_hostfile("node-1.cluster.example slots=2\n10.0.0.7:3\nfe80::1 slots=2\n[::1]:2\nGPU5.\n", "h");
  REQUIRE(hosts.size() == 5);
  CHECK(hosts[0].host == "node-1.cluster.example");
  CHECK(hosts[1].host == "10.0.0.7");
  CHECK(hosts[1].slots == 3);
  CHECK(hosts[2].host == "fe80::1");
  CHECK(hosts[2].slots == 2);
  CHECK(hosts[3].host == "::1");
  CHECK(hosts[3].slots == 2);
  CHECK(hosts[4].host == "GPU5.");
  const auto refusal = [](const std::string& text) { return test::error_of([&] { parse_hostfile(text, "hosts"); }); };
  CHECK(test::contains(refusal("a\n\x01\x02\n"), "hosts line 2: '\\x01\\x02' is not a host name (the byte '\\x01'"));
  CHECK(test::contains(refusal("a\nb\n\x1b[31mred slots=2\n"), "hosts line 3: '\\x1b[31mred' is not a host name"));
  CHECK(test::contains(refusal("user@node1\n"), "hosts line 1: 'user@node1' is not a host name (the byte '@'"));
  CHECK(test::contains(refusal("node_1\n"), "'node_1' is not a host name (the byte '_'"));
  CHECK(test::contains(refusal("-node\n"), "a label starts or ends with '-'"));
  CHECK(test::contains(refusal("a..b\n"), "an empty label between dots"));
  CHECK(test::contains(refusal(std::string(64, 'x') + "\n"), "a label of 64 characters, at most 63"));
  CHECK(test::contains(refusal("10.0.0.256\n"), "'10.0.0.256' is not a host name (digits and dots, but not an IPv4"));
  CHECK(test::contains(refusal("[node1]\n"), "'node1' in brackets is not an IPv6 address"));
  CHECK(test::contains(refusal("[::1]x\n"), "after the IPv6 address"));
  CHECK(host_name_problem("localhost").empty());
  CHECK(host_name_problem("127.0.0.1").empty());
}

TEST_CASE("launch checks what it can before starting any rank: the --ssh program, host names, --certs files") {
  test::scratch_dir dir{"cli_launch_checks"};
  const auto refused = [&](const std::vector<std::string>& argv) {
    test::child_process p(argv);
    CHECK(p.wait_exit(test::scaled(10s)) == 1);
    const std::string log = p.stderr_text();
    CHECK(!test::contains(log, "ranks on "));  // nothing started
    return log;
  };
  const std::string hosts = hostfile(dir, "localhost slots=2\n");
  const std::vector<std::string> job = {"--", "train", "--stages", "1", "--insecure"};
  const auto launch_with = [&](std::vector<std::string> flags) {
    std::vector<std::string> argv = {actorpipe, "launch"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    argv.insert(argv.end(), job.begin(), job.end());
    return argv;
  };
  CHECK(test::contains(refused(launch_with({"--hostfile", hosts, "--ssh", "no-such-ssh-program -o BatchMode=yes"})),
                       "launch --ssh: the program 'no-such-ssh-program' is not on PATH"));
  CHECK(test::contains(refused(launch_with({"--hostfile", hosts, "--ssh", dir.file("missing.sh")})),
                       "launch --ssh: " + dir.file("missing.sh") + " does not exist"));
  const std::string bad = dir.file("bad-hosts");
  std::ofstream(bad) << "localhost\n\x01\x02\n";
  CHECK(test::contains(refused(launch_with({"--hostfile", bad, "--ssh", local_ssh})),
                       bad + " line 2: '\\x01\\x02' is not a host name"));
  const std::string v6 = hostfile(dir, "::1 slots=2\n");
  CHECK(test::contains(refused(launch_with({"--hostfile", v6, "--ssh", local_ssh})),
                       "rank 0's host ::1 is an IPv6 address"));
  // Certificates for localhost only: rank 2's host 127.0.0.1 has none.
  const std::string certs = dir.file("certs");
  test::child_process make({actorpipe, "certs", "--out", certs, "localhost"});
  REQUIRE(make.wait_exit(test::scaled(30s)) == 0);
  const std::string two_hosts = hostfile(dir, "localhost slots=2\n127.0.0.1\n");
  test::child_process p({actorpipe, "launch", "--hostfile", two_hosts, "--ssh", local_ssh, "--certs", certs, "--", "train",
                         "--stages", "2"});
  CHECK(p.wait_exit(test::scaled(10s)) == 1);
  CHECK(test::contains(p.stderr_text(), "launch --certs: " + certs + "/127.0.0.1.pem (rank 2 on 127.0.0.1) is missing"));
}

TEST_CASE("a node that fails at once ends the launch within seconds, naming the rank and why, with its status") {
  test::scratch_dir dir{"cli_launch_node_fails"};
  // An ssh that cannot reach one host (as ssh says it), and runs the others' commands here.
  const std::string ssh = dir.file("ssh.sh");
  std::ofstream(ssh) << "#!/bin/sh\ncase \"$1\" in unreachable*) echo \"ssh: Could not resolve hostname $1: Name or "
                        "service not known\" >&2; exit 255;; esac\nexec " << local_ssh << " \"$@\"\n";
  std::filesystem::permissions(ssh, std::filesystem::perms::owner_all);
  const auto started = std::chrono::steady_clock::now();
  test::child_process launch({actorpipe, "launch", "--hostfile", hostfile(dir, "localhost slots=2\nunreachable\n"), "--ssh",
                              ssh, "--master-port", std::to_string(test::free_port()), "--", "train", "--stages", "2",
                              "--insecure"});
  const int code = launch.wait_exit(test::scaled(60s));  // rank 0's rendezvous alone waits 120 s
  const std::string log = launch.stderr_text();
  INFO(log);
  CHECK(code == 255);
  CHECK(std::chrono::steady_clock::now() - started < test::scaled(30s));
  CHECK(test::contains(log, "launch: rank 2 on unreachable failed (exited 255: ssh: Could not resolve hostname "
                            "unreachable: Name or service not known) before rank 0 ended the job"));
  CHECK(test::contains(log, "[localhost rank 0] error: rendezvous: rank 0: the launcher stopped the job"));
  CHECK(test::contains(log, "launch: rank 0 on localhost stopped after rank 2 failed"));
  CHECK(test::contains(log, "launch: rank 1 on localhost stopped after rank 2 failed"));
}

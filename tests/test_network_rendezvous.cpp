// The job's place from torchrun's or Slurm's variables (Slurm's host lists
// expanded), refused naming the variable when wrong; rank 0 and its nodes over loopback: registrations in any
// order come back in rank order, the job's end reaches every node ("done", or the end of the stream when rank 0
// goes away), and a rank that never comes, or comes twice, is named (Note [environment rendezvous]).
#include <doctest/doctest.h>

#include <chrono>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "network/rendezvous.hpp"
#include "network/whole_number.hpp"
#include "test_support.hpp"

using namespace ap;
using namespace std::chrono_literals;

namespace {

std::function<const char*(const char*)> environment(const std::map<std::string, std::string>& vars) {
  auto copy = std::make_shared<std::map<std::string, std::string>>(vars);
  return [copy](const char* name) -> const char* {
    const auto it = copy->find(name);
    return it == copy->end() ? nullptr : it->second.c_str();
  };
}

rendezvous_env place(int rank, int world, int port) {
  rendezvous_env e;
  e.rank = rank, e.world_size = world, e.master_host = "127.0.0.1", e.master_port = port, e.source = "test";
  return e;
}

}  // namespace

TEST_CASE("Slurm host lists expand as Slurm writes them") {
  CHECK(expand_slurm_hostlist("node1") == std::vector<std::string>{"node1"});
  CHECK(expand_slurm_hostlist("node[01-03,7],gpu5") ==
        std::vector<std::string>{"node01", "node02", "node03", "node7", "gpu5"});
  CHECK(expand_slurm_hostlist("a[8-10]b,c") == std::vector<std::string>{"a8b", "a9b", "a10b", "c"});
  CHECK(expand_slurm_hostlist("rack[1-2]") == std::vector<std::string>{"rack1", "rack2"});
  CHECK(test::contains(test::error_of([] { expand_slurm_hostlist("node[1-3"); }), "'node[1-3': a '[' is not closed"));
  CHECK(test::contains(test::error_of([] { expand_slurm_hostlist("node[5-2]"); }), "the range '5-2' runs backwards"));
  CHECK(test::contains(test::error_of([] { expand_slurm_hostlist("node[a-b]"); }), "'a-b' is not a number or a range"));
  CHECK(test::contains(test::error_of([] { expand_slurm_hostlist(""); }), "no host in it"));
}

TEST_CASE("the place in the job comes from torchrun's variables, else Slurm's, and bad ones are named") {
  const rendezvous_env t = rendezvous_from_env(
      environment({{"RANK", "2"}, {"WORLD_SIZE", "5"}, {"MASTER_ADDR", "10.0.0.1"}, {"MASTER_PORT", "23456"}}));
  CHECK(t.rank == 2);
  CHECK(t.world_size == 5);
  CHECK(t.master_host == "10.0.0.1");
  CHECK(t.master_port == 23456);
  CHECK(t.source == "RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT");
  const rendezvous_env s = rendezvous_from_env(
      environment({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "4"}, {"SLURM_STEP_NODELIST", "gpu[07-08]"}}));
  CHECK(s.rank == 0);
  CHECK(s.world_size == 4);
  CHECK(s.master_host == "gpu07");
  CHECK(s.master_port == 29500);
  const rendezvous_env job = rendezvous_from_env(environment(
      {{"SLURM_PROCID", "3"}, {"SLURM_NTASKS", "4"}, {"SLURM_JOB_NODELIST", "n1,n2"}, {"MASTER_PORT", "4000"}}));
  CHECK(job.master_host == "n1");
  CHECK(job.master_port == 4000);
  const auto refused = [](const std::map<std::string, std::string>& vars) {
    return test::error_of([&] { rendezvous_from_env(environment(vars)); });
  };
  CHECK(test::contains(refused({}), "neither torchrun's variables"));
  CHECK(test::contains(refused({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "1"}}), "MASTER_ADDR is not set"));
  CHECK(test::contains(refused({{"RANK", "2"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}}),
                       "RANK (WORLD_SIZE 2) must be a whole number from 0 to 1, got '2'"));
  CHECK(test::contains(refused({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "70000"}}),
                       "MASTER_PORT must be a whole number from 1 to 65535, got '70000'"));
  CHECK(test::contains(refused({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}}), "SLURM_STEP_NODELIST"));
}

TEST_CASE("rank 0 gets its nodes in rank order and ends the job for all of them") {
  rendezvous_server server(0, 4, test::scaled(10000ms));
  REQUIRE(server.port() > 0);
  std::vector<std::thread> nodes;
  std::vector<int> released(4, -1);
  for (int rank : {3, 1, 2})  // out of order
    nodes.emplace_back([&, rank] {
      rendezvous_client client(place(rank, 4, server.port()), test::scaled(5000ms));
      CHECK(client.local_address() == "127.0.0.1");
      client.register_node(5000 + rank);
      released[static_cast<std::size_t>(rank)] = client.wait_for_release() ? 1 : 0;
    });
  CHECK(server.wait_for_nodes() == std::vector<std::string>{"127.0.0.1:5001", "127.0.0.1:5002", "127.0.0.1:5003"});
  server.release();
  for (auto& t : nodes) t.join();
  CHECK(released == std::vector<int>{-1, 1, 1, 1});
}

TEST_CASE("a node whose rank 0 goes away without ending the job learns it, and a node can stop waiting") {
  int port = 0;
  int released = -1;
  std::thread node;
  {
    rendezvous_server server(0, 2, test::scaled(10000ms));
    port = server.port();
    node = std::thread([&] {
      rendezvous_client client(place(1, 2, port), test::scaled(5000ms));
      client.register_node(7000);
      released = client.wait_for_release() ? 1 : 0;
    });
    CHECK(server.wait_for_nodes().size() == 1);
  }  // destroyed without release(): the connection ends
  node.join();
  CHECK(released == 0);

  rendezvous_server server(0, 2, test::scaled(10000ms));
  rendezvous_client client(place(1, 2, server.port()), test::scaled(5000ms));
  client.register_node(7001);
  CHECK(server.wait_for_nodes().size() == 1);
  std::thread canceller([&] { std::this_thread::sleep_for(50ms), client.cancel(); });
  CHECK_FALSE(client.wait_for_release());
  canceller.join();
}

TEST_CASE("a rank that never registers, or registers twice, is named, a node finds no rank 0 within its time") {
  rendezvous_server server(0, 3, test::scaled(500ms));
  rendezvous_client one(place(1, 3, server.port()), test::scaled(5000ms));
  one.register_node(6001);
  const std::string waited = test::error_of([&] { server.wait_for_nodes(); });
  CHECK(test::contains(waited, "for 2 nodes; 1 registered, rank 2 did not"));

  rendezvous_server twice(0, 3, test::scaled(5000ms));
  rendezvous_client a(place(1, 3, twice.port()), test::scaled(5000ms)), b(place(1, 3, twice.port()), test::scaled(5000ms));
  a.register_node(6001);
  b.register_node(6002);
  CHECK(test::contains(test::error_of([&] { twice.wait_for_nodes(); }),
                       "a node registered as rank 1 at 127.0.0.1:6002, which another node already is"));

  int closed_port = 0;
  { closed_port = rendezvous_server(0, 2, 1ms).port(); }
  const std::string unreachable = test::error_of([&] { rendezvous_client late(place(1, 2, closed_port), 300ms); });
  CHECK(test::contains(unreachable, "rendezvous: rank 1 could not reach rank 0 at 127.0.0.1:" +
                                        std::to_string(closed_port) + " (from test) within 300 ms"));
  CHECK(test::contains(test::error_of([] { rendezvous_server(0, 1, 1ms); }), "WORLD_SIZE 1 leaves no rank to be a node"));
}

TEST_CASE("whole numbers from launchers: digits only, within the range, or refused naming what and the text") {
  CHECK(parse_whole_number("7", 1, 9, "RANK") == 7);
  CHECK(parse_whole_number("007", 1, 9, "RANK") == 7);
  for (const char* bad : {"", " 5", "+5", "-1", "5x", "10", "99999999999999999999"})
    CHECK_THROWS_WITH_AS(parse_whole_number(bad, 1, 9, "RANK"),
                         ("RANK must be a whole number from 1 to 9, got '" + std::string(bad) + "'").c_str(),
                         std::invalid_argument);
}

// examples/own_data.cpp end to end: its own data source through the engine, --auto and a warmup-cosine schedule,
// learnt, with its metrics log and the configuration that repeats the run.
#include <doctest/doctest.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "cli_runs.hpp"
#include "node_process.hpp"
#include "test_support.hpp"

using namespace ap::test;
using namespace std::chrono_literals;

TEST_CASE("the own-data example learns its clusters through the engine, logs every step and prints its configuration") {
  const std::string example = std::string(AP_BINARY_DIR) + "/examples/example_own_data";
  const std::string log = "own_data_metrics.jsonl";  // in the working directory, as the example writes it
  std::remove(log.c_str());
  const program_run run = run_program({example});
  INFO(run.err);
  REQUIRE(run.code == 0);
  REQUIRE(run.lines.size() == 2);  // the result, then the configuration
  const std::string& result = run.lines[0];
  INFO(result);
  const double accuracy = std::stod(result.substr(result.find("accuracy ") + 9));
  CHECK(accuracy > 0.9);
  const nlohmann::json& resolved = run.out;
  CHECK(resolved.at("auto") == false);  // the mesh --auto chose is in it
  CHECK(resolved.at("lr-schedule") == "cosine");
  CHECK(resolved.at("decay-steps") == 192);  // 3 epochs of 64 batches: the run's last step
  std::ifstream in(log);
  std::size_t steps = 0;
  for (std::string line; std::getline(in, line);) ++steps;
  CHECK(steps == 192);
  std::remove(log.c_str());
}

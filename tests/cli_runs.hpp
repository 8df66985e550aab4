// Running the actorpipe program (or an example) from a test to its end: its exit code, its stdout lines, the JSON
// result line it prints last, and its stderr; and two runs' results compared key by key.
#pragma once

#include <doctest/doctest.h>

#include <chrono>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "node_process.hpp"
#include "test_support.hpp"

namespace ap::test {

// The actorpipe program of this build.
inline const std::string actorpipe = std::string(AP_BINARY_DIR) + "/cli/actorpipe";

// A program run to its end.
struct program_run {
  int code = -1;                   // its exit status; -1: still running after the limit (then killed)
  std::vector<std::string> lines;  // its stdout, line by line
  nlohmann::json out;              // its last stdout line that is a whole JSON object (a run's result); null if none
  std::string err;                 // its stderr
};

// Reads p's stdout until p closes it, within `output` (scaled by the caller: Note [test time scale]), then waits
// within `exit` for p to exit (killed if it does not).
inline program_run finish(child_process& p, scaled_limit output = scaled(std::chrono::seconds(120)),
                          scaled_limit exit = scaled(std::chrono::seconds(30))) {
  program_run r;
  r.lines = p.read_lines(output);
  r.code = p.wait_exit(exit);
  if (r.code == -1) p.kill9();
  r.err = p.stderr_text();
  for (auto line = r.lines.rbegin(); line != r.lines.rend() && r.out.is_null(); ++line)
    if (!line->empty() && line->front() == '{') {
      nlohmann::json parsed = nlohmann::json::parse(*line, nullptr, false);  // not a whole object: not a result
      if (parsed.is_object()) r.out = std::move(parsed);
    }
  return r;
}

// argv[0] with argv, run to its end (finish).
inline program_run run_program(const std::vector<std::string>& argv, scaled_limit output = scaled(std::chrono::seconds(120))) {
  child_process p(argv);
  return finish(p, output);
}

// `actorpipe ARGS...` run to its end (finish).
inline program_run run_actorpipe(std::vector<std::string> args, scaled_limit output = scaled(std::chrono::seconds(120))) {
  args.insert(args.begin(), actorpipe);
  return run_program(args, output);
}

// A run that must succeed: exit 0 and a JSON result (its stderr shown otherwise); the result.
inline nlohmann::json result_of(const program_run& r) {
  INFO(r.err);
  CHECK(r.code == 0);
  REQUIRE(r.out.is_object());
  return r.out;
}

// `keys` of two results, each present in both and equal: a figure missing from either fails.
inline void check_same_fields(const nlohmann::json& got, const nlohmann::json& expected, const std::vector<std::string>& keys) {
  for (const std::string& key : keys) {
    INFO("the result's \"" << key << "\"");
    REQUIRE(got.contains(key));
    REQUIRE(expected.contains(key));
    CHECK(got.at(key) == expected.at(key));
  }
}

}  // namespace ap::test

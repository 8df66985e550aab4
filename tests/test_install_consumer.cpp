// The installed package as a user's own project sees it: `cmake --install` into a fresh prefix; every
// installed header compiled alone against actorpipe::actorpipe (fails when a public header includes an
// internal one, cmake/public_headers.cmake); examples/consumer configured and built out of tree against the
// package (fails when the package forgets a dependency); and the consumer run: its own layer on 2 stages in
// one process and on 2 of its own nodes, with the same losses. And `actorpipe --version`.
#include <doctest/doctest.h>

#include <sys/wait.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "actorpipe/version.hpp"
#include "actors/handshake.hpp"
#include "node_process.hpp"
#include "test_support.hpp"

using namespace ap::test;
using namespace std::chrono_literals;

namespace {

const std::string build_dir = AP_BINARY_DIR;
const std::string source_dir = AP_SOURCE_DIR;
const std::string cmake = AP_CMAKE_COMMAND;

// Runs a shell command with its output in `log`; returns its exit code and the log's text.
struct command_result {
  int code = -1;
  std::string output;
};
command_result run_command(const std::string& command, const std::string& log) {
  const int status = std::system((command + " > '" + log + "' 2>&1").c_str());
  std::ifstream f(log);
  std::stringstream s;
  s << f.rdbuf();
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, command + "\n" + s.str()};
}

// Configures and builds the project in `source` into `build` against the package installed in `prefix`,
// with this build's compiler (and compiler launcher, ccache, when it has one) and flags (those of its build
// type too: a sanitizer build's libraries need the sanitizer's runtime, scripts/sanitize.sh).
command_result build_against(const std::string& source, const std::string& build, const std::string& prefix) {
  std::string configure = cmake + " -S '" + source + "' -B '" + build + "' -DCMAKE_PREFIX_PATH='" + prefix +
                          "' -DCMAKE_CXX_COMPILER='" + AP_CXX_COMPILER + "' -DCMAKE_CXX_FLAGS='" + AP_CXX_FLAGS +
                          "' -DCMAKE_EXE_LINKER_FLAGS='" + AP_EXE_LINKER_FLAGS + "'";
  if (!std::string(AP_CXX_COMPILER_LAUNCHER).empty())
    configure += " -DCMAKE_CXX_COMPILER_LAUNCHER='" + std::string(AP_CXX_COMPILER_LAUNCHER) + "'";
  command_result r = run_command(configure, build + ".configure.log");
  if (r.code != 0) return r;
  command_result b = run_command(cmake + " --build '" + build + "' -j2", build + ".build.log");
  b.output = r.output + b.output;
  return b;
}

// Its stdout until it closes it (or stops writing for 60 s).
std::string all_output(child_process& p) {
  std::string out;
  for (std::string line; !(line = p.read_line(scaled(60s))).empty();) out += line + "\n";
  return out;
}

}  // namespace

TEST_CASE("`actorpipe --version` prints the library version and the wire protocol version") {
  child_process version({build_dir + "/cli/actorpipe", "--version"});
  const std::string out = all_output(version);
  CHECK(version.wait_exit(scaled(30s)) == 0);
  CHECK(out == "actorpipe " ACTORPIPE_VERSION_STRING " (wire protocol " + std::to_string(ap::wire_protocol_version) + ")\n");
}

TEST_CASE("a project of its own builds against the installed package and trains its layer in-process and on its own nodes") {
  const std::string work = build_dir + "/install_check";
  std::filesystem::remove_all(work);
  std::filesystem::create_directories(work);
  const std::string prefix = work + "/prefix";

  const command_result install = run_command(cmake + " --install '" + build_dir + "' --prefix '" + prefix + "'", work + "/install.log");
  INFO(install.output);
  REQUIRE(install.code == 0);
  for (const char* installed : {"/bin/actorpipe", "/include/actorpipe/actors/pipeline.hpp", "/include/actorpipe/version.hpp",
                                "/lib/cmake/actorpipe/actorpipe-config.cmake"})
    CHECK_MESSAGE(std::filesystem::exists(prefix + installed), installed);
  CHECK_FALSE(std::filesystem::exists(prefix + "/include/actorpipe/stage/stage_rank.hpp"));  // internal

  {
    const command_result headers = build_against(source_dir + "/tests/installed_headers", work + "/headers", prefix);
    INFO(headers.output);
    REQUIRE(headers.code == 0);
  }

  const command_result consumer = build_against(source_dir + "/examples/consumer", work + "/consumer", prefix);
  INFO(consumer.output);
  REQUIRE(consumer.code == 0);
  CHECK(contains(consumer.output, "actorpipe " ACTORPIPE_VERSION_STRING " from " + prefix + "/lib/cmake/actorpipe"));
  const std::string binary = work + "/consumer/consumer";

  child_process in_process({binary});
  const std::string local = all_output(in_process);
  INFO(local << in_process.stderr_text());
  CHECK(in_process.wait_exit(scaled(30s)) == 0);
  CHECK(contains(local, "wire protocol " + std::to_string(ap::wire_protocol_version)));
  CHECK(contains(local, "step 4: loss "));

  node_process first(binary), second(binary);
  std::vector<std::string> coordinator = {binary};
  for (const auto& f : transport_flags(tls_security())) coordinator.push_back(f);  // mutual TLS with the nodes
  coordinator.push_back(first.address());
  coordinator.push_back(second.address());
  child_process on_nodes(coordinator);
  const std::string remote = all_output(on_nodes);
  INFO(remote << on_nodes.stderr_text());
  CHECK(on_nodes.wait_exit(scaled(30s)) == 0);
  CHECK(remote == local);  // the same losses, printed the same way
  CHECK(contains(first.process().stderr_text(), "Softsign"));  // stage 0 ran the user's layer on a node
}

// examples/custom_layer.cpp end to end: its own binary as two nodes, trained like one process; and
// `actorpipe node`, which lacks the example's layer kind, refusing it at set-up.
#include <doctest/doctest.h>

#include <chrono>
#include <string>

#include "cli_runs.hpp"
#include "node_process.hpp"
#include "test_support.hpp"

using namespace ap::test;
using namespace std::chrono_literals;

namespace {

const std::string example = std::string(AP_BINARY_DIR) + "/examples/example_custom_layer";

}  // namespace

TEST_CASE("the custom-layer example trains on two of its own nodes exactly like one process") {
  node_process first(example), second(example);  // mutual TLS, the test cluster's "node" certificate
  std::vector<std::string> args{example};
  for (const auto& f : transport_flags(tls_security())) args.push_back(f);
  args.push_back(first.address());
  args.push_back(second.address());
  const program_run run = run_program(args);
  std::string out;
  for (const std::string& line : run.lines) out += line + "\n";
  INFO(out << run.err);
  CHECK(contains(out, "2 nodes step 4: loss "));
  CHECK(contains(out, ": the same"));
  CHECK(contains(out, "final loss"));
  CHECK(run.code == 0);
  CHECK(contains(first.process().stderr_text(), "FeatureScale(32)"));
}

TEST_CASE("`actorpipe node` does not know the example's layer: refused at set-up naming the kind and the node") {
  node_process node(actorpipe, {"--insecure"});
  const program_run run = run_program({example, "--insecure", node.address()});
  CHECK(run.code == 1);
  const std::string& err = run.err;
  INFO(err);
  CHECK(contains(err, "node " + node.address() + " lacks layer kind 'feature_scale', used by stage 0 (layer 1 feature_scale:32)"));
  CHECK(node.process().running());
}

TEST_CASE("ap::run_node(argc, argv) names a bad argument and exits 1") {
  const program_run bad_port = run_program({example, "node", "--port", "x"});
  CHECK(bad_port.code == 1);
  CHECK(contains(bad_port.err, "error: --port needs a non-negative integer, got x"));
  const program_run unknown = run_program({example, "node", "--colour", "red"});
  CHECK(unknown.code == 1);
  CHECK(contains(unknown.err, "error: unknown option --colour"));
}

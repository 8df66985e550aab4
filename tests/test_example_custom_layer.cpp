// examples/custom_layer.cpp end to end: its own binary as two nodes, trained like one process; and
// `actorpipe node`, which lacks the example's layer kind, refusing it at set-up.
#include <doctest/doctest.h>

#include <chrono>
#include <string>

#include "node_process.hpp"
#include "test_support.hpp"

using namespace ap::test;
using namespace std::chrono_literals;

namespace {

const std::string example = std::string(AP_BINARY_DIR) + "/examples/example_custom_layer";
const std::string actorpipe = std::string(AP_BINARY_DIR) + "/cli/actorpipe";

// Its stdout up to the line starting with `last` (or until it stops writing for 60 s).
std::string output_until(child_process& p, const std::string& last) {
  std::string out;
  for (;;) {
    const std::string line = p.read_line(60s);
    out += line + "\n";
    if (line.empty() || line.rfind(last, 0) == 0) return out;
  }
}

}  // namespace

TEST_CASE("the custom-layer example trains on two of its own nodes exactly like one process") {
  node_process first(example), second(example);  // mutual TLS, the test cluster's "node" certificate
  std::vector<std::string> args{example};
  for (const auto& f : transport_flags(tls_security())) args.push_back(f);
  args.push_back(first.address());
  args.push_back(second.address());
  child_process run(args);
  const std::string out = output_until(run, "final loss");
  INFO(out << run.stderr_text());
  CHECK(contains(out, "2 nodes step 4: loss "));
  CHECK(contains(out, ": the same"));
  CHECK(run.wait_exit(30s) == 0);
  CHECK(contains(first.process().stderr_text(), "FeatureScale(32)"));
}

TEST_CASE("`actorpipe node` does not know the example's layer: refused at set-up naming the kind and the node") {
  node_process node(actorpipe, {"--insecure"});
  child_process run({example, "--insecure", node.address()});
  CHECK(run.wait_exit(60s) == 1);
  const std::string err = run.stderr_text();
  INFO(err);
  CHECK(contains(err, "node " + node.address() + " lacks layer kind 'feature_scale', used by stage 0 (layer 1 feature_scale:32)"));
  CHECK(node.process().running());
}

TEST_CASE("ap::run_node(argc, argv) names a bad argument and exits 1") {
  child_process bad_port({example, "node", "--port", "x"});
  CHECK(bad_port.wait_exit(30s) == 1);
  CHECK(contains(bad_port.stderr_text(), "error: --port needs a non-negative integer, got x"));
  child_process unknown({example, "node", "--colour", "red"});
  CHECK(unknown.wait_exit(30s) == 1);
  CHECK(contains(unknown.stderr_text(), "error: unknown option --colour"));
}

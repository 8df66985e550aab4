// Failed waits on a node say what happened and how long they really waited (a middleman's connection timeout
// after 1.4 s once read "no answer within 30000 ms").
#include <doctest/doctest.h>

#include <chrono>

#include "actors/node.hpp"

using namespace ap;
using namespace std::chrono_literals;

TEST_CASE("wait_failure_text: our limit, the middleman's earlier connection timeout, anything else") {
  CHECK(wait_failure_text(caf::sec::request_timeout, 30000ms, 30.02) == "no answer within 30000 ms (waited 30.0 s)");
  CHECK(wait_failure_text(caf::sec::connection_timeout, 30000ms, 1.43) ==
        "no answer: the connection timed out after 1.4 s, before the limit of 30000 ms");
  const std::string other = wait_failure_text(caf::sec::cannot_connect_to_node, 30000ms, 0.01);
  CHECK(other.find("(after 0.0 s)") != std::string::npos);
  CHECK(other.find("within") == std::string::npos);
}

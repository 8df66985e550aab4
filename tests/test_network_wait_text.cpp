// Failed waits on a node say what happened and how long they really waited (a middleman's connection timeout
// after 1.4 s once read "no answer within 30000 ms"); a lost node is told killed or stopped by a port probe.
#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>

#include "actors/node.hpp"
#include "network/connect_retry.hpp"
#include "network/port_probe.hpp"
#include "test_support.hpp"

using namespace ap;
using namespace std::chrono_literals;

TEST_CASE("a connect is tried again on CAF's connection timeout, and a few times on a hang-up during the handshake, only before its deadline") {
  const auto now = std::chrono::steady_clock::now();
  CHECK(retry_connect(caf::sec::connection_timeout, now, now + 1s));
  CHECK_FALSE(retry_connect(caf::sec::connection_timeout, now + 1s, now + 1s));  // the limit is reached
  CHECK_FALSE(retry_connect(caf::sec::disconnect_during_handshake, now, now + 1s));  // no count kept: at once
  int hangups = 0;  // a few times (Note [a hang-up during the handshake]), then a disagreement
  CHECK(retry_connect(caf::sec::disconnect_during_handshake, now, now + 1s, &hangups));
  CHECK(retry_connect(caf::sec::disconnect_during_handshake, now, now + 1s, &hangups));
  CHECK_FALSE(retry_connect(caf::sec::disconnect_during_handshake, now, now + 1s, &hangups));
  CHECK(hangups == handshake_hangups_tried);
  int late = 0;
  CHECK_FALSE(retry_connect(caf::sec::disconnect_during_handshake, now + 1s, now + 1s, &late));  // the limit
  CHECK_FALSE(retry_connect(caf::sec::cannot_connect_to_node, now, now + 1s));
  CHECK_FALSE(retry_connect(caf::sec::request_timeout, now, now + 1s));
}

TEST_CASE("wait_failure_text: our limit, the middleman's earlier connection timeout, anything else") {
  CHECK(wait_failure_text(caf::sec::request_timeout, 30000ms, 30.02) == "no answer within 30000 ms (waited 30.0 s)");
  CHECK(wait_failure_text(caf::sec::connection_timeout, 30000ms, 1.43) ==
        "no answer: the connection timed out after 1.4 s, before the limit of 30000 ms");
  const std::string other = wait_failure_text(caf::sec::cannot_connect_to_node, 30000ms, 0.01);
  CHECK(other.find("(after 0.0 s)") != std::string::npos);
  CHECK(other.find("within") == std::string::npos);
}

TEST_CASE("probe_port tells a listening port from a refused one") {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  REQUIRE(::listen(fd, 4) == 0);
  socklen_t size = sizeof a;
  REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &size) == 0);
  const int port = ntohs(a.sin_port);
  CHECK(probe_port("127.0.0.1", port, test::scaled(1000ms)) == port_state::listening);  // nobody accepts: the kernel does
  ::close(fd);
  CHECK(probe_port("127.0.0.1", port, 1000ms) == port_state::refused);
  CHECK(lost_connection_text(port_state::refused, "r") ==
        " is gone (lost the connection: r; nothing listens on its port: the process died or was killed)");
  CHECK(lost_connection_text(port_state::unknown, "r") == " is gone (lost the connection: r)");
  CHECK(lost_connection_text(port_state::listening, "r").rfind(" stopped answering heartbeats (", 0) == 0);
}

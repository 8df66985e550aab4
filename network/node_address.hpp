// Where a process listens: "host:port", for nodes and for the ranks of a collective group.
#pragma once

#include <cstdint>
#include <string>

namespace ap {

struct node_address {
  std::string host;
  std::uint16_t port = 0;
  std::string text() const { return host + ":" + std::to_string(port); }
};
// "host:port" with a port in 1..65535; throws std::invalid_argument naming the text.
node_address parse_node_address(const std::string& text);

}  // namespace ap

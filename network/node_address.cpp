#include "network/node_address.hpp"

#include <stdexcept>

namespace ap {

node_address parse_node_address(const std::string& text) {
  const auto colon = text.rfind(':');
  const std::string bad = "node address \"" + text + "\" is not host:port";
  if (colon == std::string::npos || colon == 0 || colon + 1 == text.size()) throw std::invalid_argument(bad);
  const std::string port = text.substr(colon + 1);
  if (port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos) throw std::invalid_argument(bad);
  const int value = std::stoi(port);
  if (value < 1 || value > 65535) throw std::invalid_argument(bad + " (the port must be 1..65535)");
  return node_address{text.substr(0, colon), static_cast<std::uint16_t>(value)};
}

}  // namespace ap

#include "network/whole_number.hpp"

#include <stdexcept>

namespace ap {

int parse_whole_number(const std::string& text, int min, int max, const std::string& what) {
  std::size_t used = 0;
  long long v = 0;
  try {
    if (!text.empty() && text[0] >= '0' && text[0] <= '9') v = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size() || v < min || v > max)
    throw std::invalid_argument(what + " must be a whole number from " + std::to_string(min) + " to " +
                                std::to_string(max) + ", got '" + text + "'");
  return static_cast<int>(v);
}

}  // namespace ap

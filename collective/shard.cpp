#include "collective/shard.hpp"

#include <stdexcept>
#include <string>

namespace ap {

std::pair<std::size_t, std::size_t> shard_rows(std::size_t rows, std::size_t parts, std::size_t index) {
  if (parts == 0 || index >= parts)
    throw std::invalid_argument("shard " + std::to_string(index) + " of " + std::to_string(parts) +
                                " parts does not exist");
  const std::size_t base = rows / parts, extra = rows % parts;
  const std::size_t begin = index * base + std::min(index, extra);
  return {begin, begin + base + (index < extra ? 1 : 0)};
}

}  // namespace ap

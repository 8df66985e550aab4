// Which rows of a tensor are a rank's shard: one rule for the collectives and tensor-parallel layers.
#pragma once

#include <cstddef>
#include <utility>

namespace ap {

// Rows [begin, end) of `rows` split as evenly as possible over `parts` ranks, the first rows % parts
// ranks holding one row more (10 rows over 4 ranks: 3, 3, 2, 2). Throws std::invalid_argument for
// parts == 0 or index >= parts.
std::pair<std::size_t, std::size_t> shard_rows(std::size_t rows, std::size_t parts, std::size_t index);

}  // namespace ap

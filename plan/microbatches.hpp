// How a batch is split into microbatches: contiguous row ranges whose sizes differ by at most one.
#pragma once

#include <cstddef>
#include <vector>

#include "tensor/tensor.hpp"

namespace ap {

struct microbatch_range {
  std::size_t begin = 0, end = 0;  // rows [begin, end) of the batch
};

// n items in `parts` contiguous ranges whose sizes differ by at most one, the first ones larger (no checks).
std::vector<microbatch_range> even_ranges(std::size_t n, std::size_t parts);

// The first (rows % m) microbatches get one row more. Throws std::invalid_argument naming the counts when m is 0
// or above the rows, or inputs and labels differ in rows.
std::vector<microbatch_range> split_rows(std::size_t rows, int microbatches);
std::vector<microbatch_range> split_batch(const tensor& inputs, const tensor& labels, int microbatches);

}  // namespace ap

#include "plan/microbatches.hpp"

#include <stdexcept>
#include <string>

namespace ap {

std::vector<microbatch_range> even_ranges(std::size_t n, std::size_t parts) {
  std::vector<microbatch_range> out;
  std::size_t begin = 0;
  for (std::size_t i = 0; i < parts; ++i) {
    const std::size_t size = n / parts + (i < n % parts ? 1 : 0);
    out.push_back({begin, begin + size});
    begin += size;
  }
  return out;
}

std::vector<microbatch_range> split_rows(std::size_t n, int microbatches) {
  if (microbatches <= 0)
    throw std::invalid_argument("microbatches must be positive, got " + std::to_string(microbatches));
  const auto m = static_cast<std::size_t>(microbatches);
  if (n < m)
    throw std::invalid_argument("a batch of " + std::to_string(n) + " samples cannot fill " + std::to_string(m) +
                                " microbatches (every microbatch needs at least one sample)");
  return even_ranges(n, m);
}

std::vector<microbatch_range> split_batch(const tensor& inputs, const tensor& labels, int microbatches) {
  if (inputs.dimension() == 0 || labels.dimension() == 0 || inputs.shape()[0] != labels.shape()[0])
    throw std::invalid_argument("inputs " + shape_string(inputs) + " and labels " + shape_string(labels) +
                                " must have the same number of samples");
  return split_rows(inputs.shape()[0], microbatches);
}

}  // namespace ap

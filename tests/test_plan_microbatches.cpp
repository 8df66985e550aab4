// Splitting a batch into microbatches: contiguous ranges of samples (the first axis), any rank, so a
// (batch, sequence, features) batch splits into rank-3 microbatches of whole sequences.
#include <doctest/doctest.h>

#include "plan/microbatches.hpp"

using namespace ap;

namespace {

tensor counting(const shape_t& shape) {
  tensor t = tensor::from_shape(shape);
  for (std::size_t i = 0; i < t.size(); ++i) t.data()[i] = float(i);
  return t;
}

}  // namespace

TEST_CASE("a rank-3 batch splits by samples into rank-3 microbatches of whole sequences, in order") {
  const tensor inputs = counting({7, 3, 4}), targets = counting({7, 3, 2});
  const std::vector<microbatch_range> split = split_batch(inputs, targets, 3);
  REQUIRE(split.size() == 3);
  CHECK(split[0].begin == 0);
  CHECK(split[0].end == 3);
  CHECK(split[1].end == 5);
  CHECK(split[2].end == 7);
  std::vector<float> joined;
  for (const microbatch_range& r : split) {
    const tensor x = slice_rows(inputs, r.begin, r.end), t = slice_rows(targets, r.begin, r.end);
    CHECK(shape_of(x) == shape_t{r.end - r.begin, 3, 4});
    CHECK(shape_of(t) == shape_t{r.end - r.begin, 3, 2});
    joined.insert(joined.end(), x.begin(), x.end());
  }
  CHECK(joined == std::vector<float>(inputs.begin(), inputs.end()));
  // Samples, not rows: 7 sequences cannot fill 8 microbatches although they hold 21 rows.
  CHECK_THROWS_WITH_AS(split_batch(inputs, targets, 8),
                       "a batch of 7 samples cannot fill 8 microbatches (every microbatch needs at least one sample)",
                       std::invalid_argument);
  CHECK_THROWS_AS(split_batch(inputs, counting({6, 3, 2}), 2), std::invalid_argument);
}

// The length of a step is a pure function of (seed, step) over the lengths given, a
// batch is cut to its first positions, and bad lengths are refused naming what is wrong (Note [sequence lengths]).
#include <doctest/doctest.h>

#include <map>
#include <set>
#include <stdexcept>

#include "test_support.hpp"
#include "training/trainer.hpp"

using namespace ap;

TEST_CASE("sequence_length_of: the same length for the same seed and step, every length used, none other") {
  const std::vector<std::size_t> lengths = {32, 64, 128};
  std::map<std::size_t, int> seen;
  for (std::uint64_t step = 0; step < 300; ++step) {
    const std::size_t L = sequence_length_of(lengths, 7, step);
    CHECK(L == sequence_length_of(lengths, 7, step));
    ++seen[L];
  }
  CHECK(seen.size() == 3);
  for (const auto& [L, n] : seen) {
    CAPTURE(L);
    CHECK(n > 50);  // roughly a third each
  }
  int differ = 0;
  for (std::uint64_t step = 0; step < 100; ++step) differ += sequence_length_of(lengths, 7, step) != sequence_length_of(lengths, 8, step);
  CHECK(differ > 30);  // another seed, another sequence of lengths
  CHECK_THROWS_AS(sequence_length_of({}, 1, 0), std::invalid_argument);
}

TEST_CASE("first_positions keeps every window's first L inputs and labels, and refuses what does not fit") {
  batch b{tensor::from_shape({2, 4}), tensor::from_shape({2, 4})};
  for (std::size_t i = 0; i < 8; ++i) b.inputs.data()[i] = float(i), b.labels.data()[i] = float(10 + i);
  const batch cut = first_positions(b, 3);
  CHECK(cut.inputs.shape() == shape_t{2, 3});
  CHECK(cut.labels.shape() == shape_t{2, 3});
  const float inputs[] = {0, 1, 2, 4, 5, 6}, labels[] = {10, 11, 12, 14, 15, 16};
  for (std::size_t i = 0; i < 6; ++i) {
    CHECK(cut.inputs.data()[i] == inputs[i]);
    CHECK(cut.labels.data()[i] == labels[i]);
  }
  CHECK_THROWS_WITH_AS(first_positions(b, 5), "sequence length 5 does not fit windows of 4 positions (the model spec's key 'context')",
                       std::invalid_argument);
  CHECK_THROWS_AS(first_positions(b, 0), std::invalid_argument);
  batch mlp{tensor::from_shape({2, 4}), tensor::from_shape({2})};
  CHECK_THROWS_AS(first_positions(mlp, 2), std::invalid_argument);
}

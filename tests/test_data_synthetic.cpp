// Synthetic blobs: deterministic per seed, balanced, and clustered around their centres.
#include <doctest/doctest.h>

#include <cmath>
#include <stdexcept>
#include <vector>

#include "data/synthetic.hpp"

using namespace ap;

TEST_CASE("make_blobs is deterministic for a seed and differs between seeds") {
  const dataset a = make_blobs(300, 5, 3, 11);
  const dataset b = make_blobs(300, 5, 3, 11);
  const dataset c = make_blobs(300, 5, 3, 12);
  CHECK(shape_of(a.inputs) == shape_t{300, 5});
  CHECK(shape_of(a.labels) == shape_t{300});
  CHECK(a.num_classes == 3);
  CHECK(a.inputs == b.inputs);
  CHECK(a.labels == b.labels);
  CHECK(a.inputs != c.inputs);
  for (float x : a.inputs) REQUIRE(std::isfinite(x));
}

TEST_CASE("make_blobs labels are balanced round-robin") {
  const dataset d = make_blobs(103, 2, 4, 1);
  std::vector<std::size_t> counts(4, 0);
  for (std::size_t i = 0; i < d.size(); ++i) {
    CHECK(d.labels(i) == static_cast<float>(i % 4));
    ++counts[static_cast<std::size_t>(d.labels(i))];
  }
  CHECK(counts == std::vector<std::size_t>{26, 26, 26, 25});
}

TEST_CASE("make_blobs: points spread N(0, 0.5) around centres in [-2, 2]") {
  const std::size_t n = 20000, features = 3, classes = 4;
  const dataset d = make_blobs(n, features, classes, 5);
  std::vector<double> sum(classes * features, 0.0), sum_sq(classes * features, 0.0);
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t c = static_cast<std::size_t>(d.labels(i));
    for (std::size_t f = 0; f < features; ++f) {
      sum[c * features + f] += d.inputs(i, f);
      sum_sq[c * features + f] += d.inputs(i, f) * d.inputs(i, f);
    }
  }
  const double per_class = static_cast<double>(n / classes);
  for (std::size_t k = 0; k < classes * features; ++k) {
    const double mean = sum[k] / per_class;
    const double sd = std::sqrt(sum_sq[k] / per_class - mean * mean);
    INFO("class " << k / features << " feature " << k % features << ": mean " << mean << " sd " << sd);
    CHECK(std::fabs(mean) < 2.05);
    CHECK(sd == doctest::Approx(0.5).epsilon(0.05));
  }
}

TEST_CASE("make_blobs rejects zero classes or features") {
  CHECK_THROWS_AS(make_blobs(10, 2, 0, 1), std::invalid_argument);
  CHECK_THROWS_AS(make_blobs(10, 0, 2, 1), std::invalid_argument);
  CHECK(make_blobs(0, 2, 2, 1).size() == 0);
}

// Small synthetic data sets for tests: seeded, instant, learnable.
#pragma once

#include <cstdint>

#include "data/dataset.hpp"

namespace ap {

// `samples` points of `features` dimensions in `classes` Gaussian blobs around seeded centres.
dataset make_blobs(std::size_t samples, std::size_t features, std::size_t classes, std::uint64_t seed);

}  // namespace ap

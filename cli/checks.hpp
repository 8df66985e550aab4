// Checks of command-line values, run before any work: a bad flag fails at once, naming flag and value.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "engine/run_config.hpp"

namespace ap::cli {

// A whole number in [min, max], checked on the text before CLI11 converts it ("-1" never reaches a size_t).
CLI::Validator whole_number(std::uint64_t min, std::uint64_t max = std::numeric_limits<std::uint64_t>::max());

// A finite real number above `min` (or at least `min` when `inclusive`) and below `below` (if given).
CLI::Validator real_number(double min, bool inclusive, double below = std::numeric_limits<double>::infinity());

// A dtype name (tensor/dtype.hpp).
CLI::Validator dtype_name();


// For flags that need another: std::invalid_argument naming the first of `options` given.
void refuse_given(const std::vector<const CLI::Option*>& options, const std::string& why);

}  // namespace ap::cli

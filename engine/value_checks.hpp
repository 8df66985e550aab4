// Checks of a setting's value as written: each returns "" or why not. The CLI and the JSON reader share them, so
// a flag and its key refuse the same values in the same words.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

namespace ap {

using value_check = std::function<std::string(const std::string&)>;

// A whole number in [min, max], checked on the text (so "-1" never wraps into a huge unsigned number).
value_check whole_number_check(std::uint64_t min, std::uint64_t max = std::numeric_limits<std::uint64_t>::max());
// A finite real number above `min` (or at least `min` when `inclusive`) and below `below`.
value_check real_number_check(double min, bool inclusive, double below = std::numeric_limits<double>::infinity());
// One of `choices`, named in the refusal.
value_check one_of_check(std::vector<std::string> choices);
// A dtype name (tensor/dtype.hpp): fp32, float32, bf16, bfloat16, ...
value_check dtype_check();

}  // namespace ap

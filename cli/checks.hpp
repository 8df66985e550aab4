// Checks of command-line values, run before any work: a bad flag fails at once, naming the flag and the value,
// never after loading data or training (a negative count once wrapped into a huge size_t and trained "forever").
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "engine/run_config.hpp"  // check_output_path

namespace ap::cli {

// A whole number in [min, max], checked on the text before CLI11 converts it (so "-1" never reaches a
// size_t); CLI11 puts the flag's name in front of the message: "--epochs: -1 is not a whole number >= 1".
CLI::Validator whole_number(std::uint64_t min, std::uint64_t max = std::numeric_limits<std::uint64_t>::max());

// A finite real number above `min` (or at least `min` when `inclusive`) and below `below` (if given).
CLI::Validator real_number(double min, bool inclusive, double below = std::numeric_limits<double>::infinity());

// A dtype name (tensor/dtype.hpp: fp32, float32, f32, F32, bf16, bfloat16, BF16): "--dtype: fp16 is not a
// dtype: expected fp32 or bf16 (float32, bfloat16)".
CLI::Validator dtype_name();


// Throws std::invalid_argument naming the first of `options` given on the command line:
// "--schedule needs --stages: ...". For flags that only mean something together with another.
void refuse_given(const std::vector<const CLI::Option*>& options, const std::string& why);

}  // namespace ap::cli

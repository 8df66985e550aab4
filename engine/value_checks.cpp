#include "engine/value_checks.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "tensor/dtype.hpp"

namespace ap {
namespace {

std::string shortest(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", v);
  return text;
}

std::string trimmed(std::string text) {
  // "1, 4" after a comma split: the spaces around a number are not part of it.
  text.erase(0, std::min(text.size(), text.find_first_not_of(" \t")));
  text.erase(text.find_last_not_of(" \t") + 1);
  return text;
}

}  // namespace

value_check whole_number_check(std::uint64_t min, std::uint64_t max) {
  std::string wanted = "a whole number >= " + std::to_string(min);
  if (max != std::numeric_limits<std::uint64_t>::max())
    wanted = "a whole number from " + std::to_string(min) + " to " + std::to_string(max);
  return [=](const std::string& raw) -> std::string {
    const std::string text = trimmed(raw);
    const std::string bad = text + " is not " + wanted;
    if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos) return bad;
    errno = 0;
    const unsigned long long v = std::strtoull(text.c_str(), nullptr, 10);
    if (errno == ERANGE || v < min || v > max) return bad;
    return "";
  };
}

value_check real_number_check(double min, bool inclusive, double below) {
  std::string wanted = std::string("a number ") + (inclusive ? ">= " : "> ") + shortest(min);
  if (std::isfinite(below)) wanted += " and < " + shortest(below);
  return [=](const std::string& text) -> std::string {
    char* end = nullptr;
    errno = 0;
    const double v = std::strtod(text.c_str(), &end);
    const bool parsed = !text.empty() && end == text.c_str() + text.size() && errno != ERANGE;
    if (!parsed || !std::isfinite(v) || v < min || (!inclusive && v == min) || !(v < below))
      return text + " is not " + wanted;
    return "";
  };
}

value_check one_of_check(std::vector<std::string> choices) {
  return [choices = std::move(choices)](const std::string& text) -> std::string {
    if (std::find(choices.begin(), choices.end(), text) != choices.end()) return "";
    std::string list;
    for (const auto& c : choices) list += (list.empty() ? "" : ", ") + c;
    return "'" + text + "' is not one of " + list;
  };
}

value_check dtype_check() {
  return [](const std::string& text) -> std::string {
    if (parse_dtype(text)) return "";
    return text + " is not a dtype: expected fp32 or bf16 (float32, bfloat16)";
  };
}

}  // namespace ap

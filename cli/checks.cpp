#include "cli/checks.hpp"

#include <algorithm>

#include "engine/value_checks.hpp"

namespace ap::cli {

namespace {
CLI::Validator validator(value_check check, const std::string& type, const std::string& name) {
  return CLI::Validator([check = std::move(check)](std::string& text) { return check(text); }, type, name);
}
}  // namespace

CLI::Validator whole_number(std::uint64_t min, std::uint64_t max) {
  return CLI::Validator(
      [check = whole_number_check(min, max)](std::string& text) {
        // "1, 4" after a comma split: the spaces around a number are not part of it (nor of what CLI11 converts).
        text.erase(0, std::min(text.size(), text.find_first_not_of(" \t")));
        text.erase(text.find_last_not_of(" \t") + 1);
        return check(text);
      },
      "UINT", "whole_number");
}

CLI::Validator real_number(double min, bool inclusive, double below) {
  return validator(real_number_check(min, inclusive, below), "REAL", "real_number");
}

CLI::Validator dtype_name() { return validator(dtype_check(), "DTYPE", "dtype_name"); }

void refuse_given(const std::vector<const CLI::Option*>& options, const std::string& why) {
  for (const CLI::Option* o : options)
    if (o->count() > 0) throw std::invalid_argument(o->get_name() + " " + why);
}

}  // namespace ap::cli

#include "model/spec_text.hpp"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>

namespace ap {

std::vector<std::string> split_fields(const std::string& text, char separator) {
  std::vector<std::string> fields(1);
  for (char c : text) {
    if (c == separator)
      fields.emplace_back();
    else
      fields.back() += c;
  }
  return fields;
}

namespace {

[[noreturn]] void bad_field(const std::string& field, const std::string& spec, const char* wanted) {
  throw std::invalid_argument("bad spec '" + spec + "': '" + field + "' is not " + wanted);
}

bool all_digits(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s)
    if (c < '0' || c > '9') return false;
  return true;
}

}  // namespace

std::size_t parse_width(const std::string& field, const std::string& spec) {
  // strtoull alone accepts "-3", " 7" and "7x"; a width is digits only.
  if (!all_digits(field)) bad_field(field, spec, "a positive integer");
  errno = 0;
  const unsigned long long v = std::strtoull(field.c_str(), nullptr, 10);
  if (errno == ERANGE || v == 0) bad_field(field, spec, "a positive integer");
  return static_cast<std::size_t>(v);
}

std::uint64_t parse_seed(const std::string& field, const std::string& spec) {
  if (!all_digits(field)) bad_field(field, spec, "a non-negative integer");
  errno = 0;
  const unsigned long long v = std::strtoull(field.c_str(), nullptr, 10);
  if (errno == ERANGE) bad_field(field, spec, "a 64-bit seed");
  return static_cast<std::uint64_t>(v);
}

float parse_float(const std::string& field, const std::string& spec) {
  char* end = nullptr;
  const float v = std::strtof(field.c_str(), &end);
  if (field.empty() || end != field.c_str() + field.size() || !std::isfinite(v))
    bad_field(field, spec, "a finite number");
  return v;
}

std::string format_float(float value) {
  char buffer[32];
  for (int precision = 1; precision <= 9; ++precision) {  // 9 significant digits always round-trip a float
    std::snprintf(buffer, sizeof buffer, "%.*g", precision, static_cast<double>(value));
    if (std::strtof(buffer, nullptr) == value) break;
  }
  return buffer;
}

}  // namespace ap

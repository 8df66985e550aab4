// Reading and writing the small texts that name layers ("linear:784:512") and models ("784-512-10").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ap {

// "a:b:c" -> {"a", "b", "c"}; empty fields are kept, so "a::b" is caught by the field parsers.
std::vector<std::string> split_fields(const std::string& text, char separator);

// Each parser takes the whole spec text too, for the error to name it.
std::size_t parse_width(const std::string& field, const std::string& spec);     // a positive integer
float parse_float(const std::string& field, const std::string& spec);           // a finite number
std::uint64_t parse_seed(const std::string& field, const std::string& spec);    // a non-negative integer

// The shortest text that reads back as exactly `value` ("0.1", not "0.100000001"): specs round-trip.
std::string format_float(float value);

}  // namespace ap

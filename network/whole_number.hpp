// A whole number from a user's or launcher's text: one parser and one refusal text for the launch paths.
#pragma once

#include <string>

namespace ap {

// `text` as a whole number in [min, max]; else std::invalid_argument "WHAT must be a whole number from MIN to
// MAX, got 'TEXT'" (signs, spaces and trailing characters refused).
int parse_whole_number(const std::string& text, int min, int max, const std::string& what);

}  // namespace ap

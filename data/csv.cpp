#include "data/csv.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <stdexcept>
#include <vector>

namespace ap {

namespace {

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw std::runtime_error("csv file " + path + ": " + what);
}

std::string trim(const std::string& s) {
  std::size_t b = 0, e = s.size();
  while (b < e && (s[b] == ' ' || s[b] == '\t' || s[b] == '\r')) ++b;
  while (e > b && (s[e - 1] == ' ' || s[e - 1] == '\t' || s[e - 1] == '\r')) --e;
  return s.substr(b, e - b);
}

std::vector<std::string> split(const std::string& line) {
  std::vector<std::string> fields;
  std::size_t begin = 0;
  for (;;) {
    const std::size_t comma = line.find(',', begin);
    fields.push_back(trim(line.substr(begin, comma == std::string::npos ? std::string::npos : comma - begin)));
    if (comma == std::string::npos) return fields;
    begin = comma + 1;
  }
}

}  // namespace

dataset csv_dataset(const std::string& path, const std::string& label_column, std::size_t classes) {
  std::ifstream in(path);
  if (!in) fail(path, "cannot open (missing or unreadable)");
  std::string line;
  std::size_t line_number = 0;
  std::vector<std::string> columns;
  while (columns.empty() && std::getline(in, line)) {
    ++line_number;
    if (!trim(line).empty()) columns = split(line);
  }
  if (columns.empty()) fail(path, "empty: no header row");
  std::size_t label_at = columns.size();
  for (std::size_t c = 0; c < columns.size(); ++c)
    if (columns[c] == label_column) label_at = c;
  if (label_at == columns.size()) {
    std::string names;
    for (const auto& c : columns) names += (names.empty() ? "'" : ", '") + c + "'";
    fail(path, "no label column '" + label_column + "' in the header (line " + std::to_string(line_number) +
                   "): its columns are " + names);
  }
  if (columns.size() < 2) fail(path, "no feature columns besides the label column '" + label_column + "'");
  const std::size_t features = columns.size() - 1;
  std::vector<float> inputs, labels;
  std::size_t largest = 0;
  while (std::getline(in, line)) {
    ++line_number;
    if (trim(line).empty()) continue;
    const std::vector<std::string> fields = split(line);
    const std::string where = "line " + std::to_string(line_number) + ", column '";
    if (fields.size() > columns.size())
      fail(path, "line " + std::to_string(line_number) + " has " + std::to_string(fields.size()) +
                     " fields, the header " + std::to_string(columns.size()));
    for (std::size_t c = 0; c < columns.size(); ++c) {
      if (c >= fields.size() || fields[c].empty()) fail(path, where + columns[c] + "': missing value");
      const char* text = fields[c].c_str();
      char* end = nullptr;
      errno = 0;
      const float v = std::strtof(text, &end);
      if (end == text || *end != '\0' || !std::isfinite(v))
        fail(path, where + columns[c] + "': '" + fields[c] + "' is not a finite number");
      if (c != label_at) {
        inputs.push_back(v);
        continue;
      }
      if (v < 0 || v != std::floor(v) || v >= 16777216.0f)
        fail(path, where + columns[c] + "': label '" + fields[c] + "' is not a class id (a non-negative integer)");
      const std::size_t label = static_cast<std::size_t>(v);
      if (classes != 0 && label >= classes)
        fail(path, where + columns[c] + "': label " + std::to_string(label) + " is not below the model's " +
                       std::to_string(classes) + " classes");
      largest = std::max(largest, label);
      labels.push_back(v);
    }
  }
  if (in.bad()) fail(path, "read error after line " + std::to_string(line_number));
  const std::size_t n = labels.size();
  dataset d;
  d.name = path;
  d.num_classes = classes != 0 ? classes : (n == 0 ? 0 : largest + 1);
  d.inputs = tensor::from_shape({n, features});
  d.labels = tensor::from_shape({n});
  std::copy(inputs.begin(), inputs.end(), d.inputs.data());
  std::copy(labels.begin(), labels.end(), d.labels.data());
  return d;
}

std::shared_ptr<const data_source> csv_source(const std::string& path, const std::string& label_column,
                                              std::size_t classes) {
  return memory_source(csv_dataset(path, label_column, classes));
}

}  // namespace ap

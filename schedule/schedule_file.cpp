#include "schedule/schedule_file.hpp"

#include <fstream>
#include <sstream>
#include <stdexcept>

namespace ap {

namespace {
bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
}  // namespace

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open schedule file '" + path + "'");
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  if (!out || !(out << text) || !out.flush()) throw std::runtime_error("cannot write '" + path + "'");
}

schedule read_schedule_file(const std::string& path) {
  const std::string text = read_text(path);
  try {
    return ends_with(path, ".csv") ? parse_csv(text) : parse_grid(text);
  } catch (const std::invalid_argument& e) {
    throw std::runtime_error("schedule file '" + path + "': " + e.what());
  }
}

}  // namespace ap

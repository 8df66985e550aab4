// Layers only point down: a file may include its own folder and the folders listed before it in the README's
// folder table (lowest layer first), never one listed after it. Reads the table and every source's
// `#include "folder/..."` lines; a violation names the file, the line and both folders.
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;

const fs::path source_root = AP_SOURCE_DIR;

// The folders of the README's table under "## Folders", in table order: lowest first.
std::vector<std::string> folder_order(const fs::path& readme) {
  std::ifstream in(readme);
  std::vector<std::string> order;
  const std::regex row(R"(^\| `([a-z_]+)/` \|)");
  bool in_section = false;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("## ", 0) == 0) in_section = line == "## Folders";
    std::smatch m;
    if (in_section && std::regex_search(line, m, row)) order.push_back(m[1]);
  }
  return order;
}

// "stage/x.hpp:13: includes actors/messages.hpp, but actors/ comes after stage/ in the README's folder table ..."
std::vector<std::string> upward_includes(const std::vector<std::string>& order) {
  const auto rank = [&](const std::string& folder) {
    return std::find(order.begin(), order.end(), folder) - order.begin();
  };
  const std::regex include(R"(^\s*#\s*include\s*"([a-z_]+)/([^"]+)\")");
  std::vector<std::string> found;
  for (const auto& folder : order) {
    if (!fs::is_directory(source_root / folder)) continue;
    for (const auto& entry : fs::recursive_directory_iterator(source_root / folder)) {
      const auto ext = entry.path().extension().string();
      if (!entry.is_regular_file() || (ext != ".cpp" && ext != ".hpp" && ext != ".c" && ext != ".h")) continue;
      std::ifstream in(entry.path());
      int number = 0;
      for (std::string line; std::getline(in, line);) {
        ++number;
        std::smatch m;
        if (!std::regex_search(line, m, include)) continue;
        const std::string target = m[1];
        if (std::find(order.begin(), order.end(), target) == order.end()) continue;  // not a folder of ours
        if (rank(target) > rank(folder))
          found.push_back(fs::relative(entry.path(), source_root).string() + ":" + std::to_string(number) +
                          ": includes " + target + "/" + std::string(m[2]) + ", but " + target + "/ comes after " +
                          folder + "/ in the README's folder table (a higher layer)");
      }
    }
  }
  return found;
}

}  // namespace

TEST_CASE("the README's folder table lists the source folders, lowest first") {
  const auto order = folder_order(source_root / "README.md");
  REQUIRE(order.size() >= 10);
  const auto at = [&](const std::string& f) { return std::find(order.begin(), order.end(), f) - order.begin(); };
  for (const char* f : {"failure", "tensor", "network", "collective", "model", "stage", "training", "actors", "cli", "tests"})
    CHECK_MESSAGE(at(f) < static_cast<long>(order.size()), f << "/ is missing from the README's folder table");
  CHECK(at("tensor") < at("model"));
  CHECK(at("actors") < at("cli"));
}

TEST_CASE("no file includes a folder above its own") {
  const auto order = folder_order(source_root / "README.md");
  REQUIRE(!order.empty());
  const auto violations = upward_includes(order);
  for (const auto& v : violations) MESSAGE(v);
  CHECK(violations.empty());
}

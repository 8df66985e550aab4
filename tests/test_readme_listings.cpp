// The README's code listings cannot rot: a fenced block right after `<!-- listing: PATH -->` must be the file
// PATH whole, and one after `<!-- excerpt: PATH -->` a run of consecutive lines of it. PATH is relative to the
// source root; the files themselves are compiled and run by other tests (examples/, the installed consumer).
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;

const fs::path source_root = AP_SOURCE_DIR;

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

std::string read(const fs::path& path) {
  std::ifstream in(path);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

struct marked_block {
  std::string kind;  // "listing" or "excerpt"
  std::string path;
  std::size_t line = 0;  // of the marker, 1-based
  std::vector<std::string> lines;
  bool fenced = false;  // a ``` block followed the marker
};

// Every `<!-- listing: PATH ... -->` or `<!-- excerpt: PATH ... -->` marker and the fenced block after it.
std::vector<marked_block> marked_blocks(const std::vector<std::string>& readme) {
  std::vector<marked_block> blocks;
  for (std::size_t i = 0; i < readme.size(); ++i) {
    for (const std::string kind : {"listing", "excerpt"}) {
      const std::string marker = "<!-- " + kind + ": ";
      if (readme[i].rfind(marker, 0) != 0) continue;
      marked_block b;
      b.kind = kind;
      b.line = i + 1;
      const std::string rest = readme[i].substr(marker.size());
      b.path = rest.substr(0, rest.find_first_of(" -"));
      if (i + 1 < readme.size() && readme[i + 1].rfind("```", 0) == 0) {
        std::size_t j = i + 2;
        for (; j < readme.size() && readme[j].rfind("```", 0) != 0; ++j) b.lines.push_back(readme[j]);
        b.fenced = j < readme.size();
      }
      blocks.push_back(b);
    }
  }
  return blocks;
}

bool contains_run(const std::vector<std::string>& file, const std::vector<std::string>& run) {
  if (run.empty() || run.size() > file.size()) return false;
  for (std::size_t start = 0; start + run.size() <= file.size(); ++start) {
    bool same = true;
    for (std::size_t k = 0; k < run.size() && same; ++k) same = file[start + k] == run[k];
    if (same) return true;
  }
  return false;
}

}  // namespace

TEST_CASE("every marked README listing is its file, and every marked excerpt is a run of its file's lines") {
  const auto readme = lines_of(read(source_root / "README.md"));
  const auto blocks = marked_blocks(readme);
  CHECK(blocks.size() >= 5);  // the consumer's two files, the layer and the loss registrations
  for (const auto& b : blocks) {
    INFO("README.md:" << b.line << ": " << b.kind << " of " << b.path);
    REQUIRE(b.fenced);
    const fs::path file = source_root / b.path;
    REQUIRE(fs::exists(file));
    const auto lines = lines_of(read(file));
    if (b.kind == "listing")
      CHECK(b.lines == lines);
    else
      CHECK(contains_run(lines, b.lines));
  }
}

TEST_CASE("the listing check fails on a listing that differs from its file") {
  const std::vector<std::string> readme{"<!-- excerpt: examples/custom_layer.cpp -->", "```cpp",
                                        "static const ap::loss_registration smoothed_loss{\"renamed\",", "```"};
  const auto blocks = marked_blocks(readme);
  REQUIRE(blocks.size() == 1);
  CHECK(blocks[0].fenced);
  CHECK(blocks[0].path == "examples/custom_layer.cpp");
  CHECK_FALSE(contains_run(lines_of(read(source_root / blocks[0].path)), blocks[0].lines));
}

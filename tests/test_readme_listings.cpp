// The code listings of README.md and docs/*.md cannot rot: a fenced block right after `<!-- listing: PATH -->` must
// be the file PATH whole, and one after `<!-- excerpt: PATH -->` a run of consecutive lines of it. PATH is relative
// to the source root; the files themselves are compiled and run by other tests (examples/, the installed consumer).
// A C++ or CMake block without such a marker fails (shell commands and output need none), and so does a relative
// link (`](docs/x.md)`, `](x.md#y)`, `](../README.md)`) to a file that does not exist or a heading a page lacks.
// Every failure names the page and its line.
#include <doctest/doctest.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
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

// The pages checked, relative to the source root: README.md, then every docs/*.md in name order.
std::vector<std::string> pages() {
  std::vector<std::string> docs;
  if (fs::is_directory(source_root / "docs"))
    for (const auto& entry : fs::directory_iterator(source_root / "docs"))
      if (entry.is_regular_file() && entry.path().extension() == ".md")
        docs.push_back("docs/" + entry.path().filename().string());
  std::sort(docs.begin(), docs.end());
  docs.insert(docs.begin(), "README.md");
  return docs;
}

// Pages that hold marked listings, and how many at least: a listing moved off its page without this table
// following it, or a marker lost, fails. A page not named here may hold none.
const std::map<std::string, std::size_t> expected_markers{
    {"docs/library.md", 3},  // the consumer's two files, the pipeline of examples/local_pipeline.cpp
    {"docs/models.md", 5},   // the layer and the loss registrations, the loss option, the consumer as a node
};

bool is_fence(const std::string& line) {
  const auto first = line.find_first_not_of(' ');
  return first != std::string::npos && first <= 3 && line.compare(first, 3, "```") == 0;
}

struct marked_block {
  std::string kind;  // "listing" or "excerpt"
  std::string path;
  std::size_t line = 0;  // of the marker, 1-based
  std::vector<std::string> lines;
  bool fenced = false;  // a ``` block followed the marker
};

// Every `<!-- listing: PATH ... -->` or `<!-- excerpt: PATH ... -->` marker and the fenced block after it.
std::vector<marked_block> marked_blocks(const std::vector<std::string>& page) {
  std::vector<marked_block> blocks;
  for (std::size_t i = 0; i < page.size(); ++i) {
    for (const std::string kind : {"listing", "excerpt"}) {
      const std::string marker = "<!-- " + kind + ": ";
      if (page[i].rfind(marker, 0) != 0) continue;
      marked_block b;
      b.kind = kind;
      b.line = i + 1;
      const std::string rest = page[i].substr(marker.size());
      b.path = rest.substr(0, rest.find_first_of(" -"));
      if (i + 1 < page.size() && page[i + 1].rfind("```", 0) == 0) {
        std::size_t j = i + 2;
        for (; j < page.size() && page[j].rfind("```", 0) != 0; ++j) b.lines.push_back(page[j]);
        b.fenced = j < page.size();
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

// What is wrong with one marked block of `page`, as "PAGE:LINE: ...", or "" when a listing is its file and an
// excerpt a run of its file's lines.
std::string block_problem(const std::string& page, const marked_block& b) {
  const std::string at = page + ":" + std::to_string(b.line) + ": " + b.kind + " of " + b.path + ": ";
  if (!b.fenced) return at + "no fenced block (``` ... ```) right after the marker";
  const fs::path file = source_root / b.path;
  if (!fs::is_regular_file(file)) return at + b.path + " does not exist";
  const auto lines = lines_of(read(file));
  const auto page_line = [&](std::size_t k) { return page + ":" + std::to_string(b.line + 2 + k); };
  if (b.kind == "listing") {
    if (b.lines == lines) return "";
    std::size_t k = 0;
    while (k < b.lines.size() && k < lines.size() && b.lines[k] == lines[k]) ++k;
    if (k == b.lines.size())
      return at + "the block ends at line " + std::to_string(k) + " of " + std::to_string(lines.size()) + " of the file";
    if (k == lines.size()) return at + page_line(k) + ": the block goes on after the file's last line";
    return at + page_line(k) + " differs from " + b.path + ":" + std::to_string(k + 1) + ": \"" + b.lines[k] +
           "\" against \"" + lines[k] + "\"";
  }
  if (b.lines.empty()) return at + "the block is empty";
  if (contains_run(lines, b.lines)) return "";
  for (std::size_t k = 0; k < b.lines.size(); ++k)
    if (std::find(lines.begin(), lines.end(), b.lines[k]) == lines.end())
      return at + page_line(k) + ": \"" + b.lines[k] + "\" is no line of " + b.path;
  return at + "every line is in " + b.path + ", but not as one run of consecutive lines";
}

// "PAGE:LINE: ..." for every ```cpp, ```c++ or ```cmake block that no marker precedes.
std::vector<std::string> unmarked_code_blocks(const std::string& page, const std::vector<std::string>& lines) {
  std::vector<std::string> found;
  bool in_fence = false;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    if (!is_fence(lines[i])) continue;
    if (in_fence) {
      in_fence = false;
      continue;
    }
    in_fence = true;
    std::string info = lines[i].substr(lines[i].find("```") + 3);
    info = info.substr(0, info.find_first_of(" {"));
    std::transform(info.begin(), info.end(), info.begin(), [](unsigned char c) { return std::tolower(c); });
    if (info != "cpp" && info != "c++" && info != "cmake") continue;
    const bool marked = i > 0 && (lines[i - 1].rfind("<!-- listing: ", 0) == 0 || lines[i - 1].rfind("<!-- excerpt: ", 0) == 0);
    if (!marked)
      found.push_back(page + ":" + std::to_string(i + 1) + ": a ```" + info +
                      " block without a `<!-- listing: PATH -->` or `<!-- excerpt: PATH -->` marker on the line before");
  }
  return found;
}

// GitHub's anchor for a heading: lowercase, spaces to '-', punctuation dropped except '-' and '_'.
std::string github_slug(const std::string& heading) {
  std::string slug;
  for (const unsigned char c : heading) {
    if (std::isalnum(c) || c == '-' || c == '_' || c >= 0x80)
      slug += static_cast<char>(std::tolower(c));
    else if (c == ' ')
      slug += '-';
  }
  return slug;
}

// The anchors of a page's headings (outside fenced blocks); a repeated heading gets -1, -2, ... as on GitHub.
std::set<std::string> anchors_of(const std::vector<std::string>& lines) {
  std::set<std::string> anchors;
  std::map<std::string, int> seen;
  bool in_fence = false;
  for (const auto& line : lines) {
    if (is_fence(line)) in_fence = !in_fence;
    if (in_fence || line.empty() || line[0] != '#') continue;
    const auto text_at = line.find_first_not_of('#');
    if (text_at == std::string::npos || text_at > 6 || line[text_at] != ' ') continue;
    std::string text = line.substr(text_at + 1);
    while (!text.empty() && (text.back() == ' ' || text.back() == '#')) text.pop_back();
    const std::string slug = github_slug(text);
    const int n = seen[slug]++;
    anchors.insert(n == 0 ? slug : slug + "-" + std::to_string(n));
  }
  return anchors;
}

struct md_link {
  std::size_t line = 0;  // 1-based
  std::string target;
};

// Every inline link `](target)` of a page, outside fenced blocks and code spans.
std::vector<md_link> links_of(const std::vector<std::string>& lines) {
  std::vector<md_link> links;
  bool in_fence = false;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    if (is_fence(lines[i])) in_fence = !in_fence;
    if (in_fence) continue;
    std::string text;  // the line without its code spans
    bool in_code = false;
    for (const char c : lines[i]) {
      if (c == '`') in_code = !in_code;
      else if (!in_code) text += c;
    }
    for (auto at = text.find("]("); at != std::string::npos; at = text.find("](", at + 2)) {
      const auto end = text.find(')', at + 2);
      if (end == std::string::npos) break;
      std::string target = text.substr(at + 2, end - at - 2);
      target = target.substr(0, target.find(' '));  // a title after the address
      links.push_back({i + 1, target});
    }
  }
  return links;
}

bool is_relative(const std::string& target) {
  for (const char* scheme : {"http://", "https://", "mailto:", "ftp://"})
    if (target.rfind(scheme, 0) == 0) return false;
  return !target.empty();
}

// "PAGE:LINE: ..." for every relative link of `page` (relative to the source root) whose file does not exist,
// or whose #anchor is no heading of the Markdown page it points to.
std::vector<std::string> broken_links(const std::string& page, const std::vector<std::string>& lines) {
  std::vector<std::string> found;
  const fs::path folder = (source_root / page).parent_path();
  for (const auto& l : links_of(lines)) {
    if (!is_relative(l.target)) continue;
    const auto hash = l.target.find('#');
    const std::string file = l.target.substr(0, hash);
    const std::string anchor = hash == std::string::npos ? "" : l.target.substr(hash + 1);
    const std::string at = page + ":" + std::to_string(l.line) + ": link to " + l.target + ": ";
    const fs::path target = file.empty() ? source_root / page : (folder / file).lexically_normal();
    const std::string name = target.lexically_relative(source_root.lexically_normal()).generic_string();
    if (!file.empty() && !fs::exists(target)) {
      found.push_back(at + "no file " + name);
      continue;
    }
    if (anchor.empty() || target.extension() != ".md") continue;
    const auto anchors = anchors_of(file.empty() ? lines : lines_of(read(target)));
    if (!anchors.count(anchor))
      found.push_back(at + "no heading of " + name + " has the anchor #" + anchor);
  }
  return found;
}

}  // namespace

TEST_CASE("every marked listing in README.md and docs/*.md is its file, and every marked excerpt is a run of its file's lines") {
  const auto all = pages();
  std::size_t total = 0;
  for (const auto& page : all) {
    const auto blocks = marked_blocks(lines_of(read(source_root / page)));
    total += blocks.size();
    for (const auto& b : blocks) {
      const std::string problem = block_problem(page, b);
      CHECK_MESSAGE(problem.empty(), problem);
    }
    const auto expected = expected_markers.find(page);
    if (expected != expected_markers.end())
      CHECK_MESSAGE(blocks.size() >= expected->second, page << ":1: " << blocks.size()
                                                             << " marked listings and excerpts, expected at least "
                                                             << expected->second);
  }
  for (const auto& [page, count] : expected_markers)
    CHECK_MESSAGE(std::find(all.begin(), all.end(), page) != all.end(),
                  page << " is missing: the " << count << " marked listings it held are gone");
  CHECK(total >= 5);  // the consumer's two files, the layer and the loss registrations
}

TEST_CASE("the listing check fails on a listing that differs from its file") {
  const std::vector<std::string> readme{"<!-- excerpt: examples/custom_layer.cpp -->", "```cpp",
                                        "static const ap::loss_registration smoothed_loss{\"renamed\",", "```"};
  const auto blocks = marked_blocks(readme);
  REQUIRE(blocks.size() == 1);
  CHECK(blocks[0].fenced);
  CHECK(blocks[0].path == "examples/custom_layer.cpp");
  CHECK_FALSE(contains_run(lines_of(read(source_root / blocks[0].path)), blocks[0].lines));
  const std::string problem = block_problem("docs/x.md", blocks[0]);
  CHECK(problem.find("docs/x.md:1: excerpt of examples/custom_layer.cpp: docs/x.md:3: ") == 0);

  auto file = lines_of(read(source_root / "examples/consumer/CMakeLists.txt"));
  REQUIRE(file.size() > 4);
  file[3] = "cmake_minimum_required(VERSION 2.8)";
  std::vector<std::string> page{"text", "<!-- listing: examples/consumer/CMakeLists.txt -->", "```cmake"};
  page.insert(page.end(), file.begin(), file.end());
  page.push_back("```");
  const auto listing = marked_blocks(page);
  REQUIRE(listing.size() == 1);
  CHECK(block_problem("README.md", listing[0]) ==
        "README.md:2: listing of examples/consumer/CMakeLists.txt: README.md:7 differs from "
        "examples/consumer/CMakeLists.txt:4: \"cmake_minimum_required(VERSION 2.8)\" against \"" +
            lines_of(read(source_root / "examples/consumer/CMakeLists.txt"))[3] + "\"");
}

TEST_CASE("every C++ and CMake block in README.md and docs/*.md is a marked listing or excerpt") {
  for (const auto& page : pages())
    for (const auto& problem : unmarked_code_blocks(page, lines_of(read(source_root / page)))) CHECK_MESSAGE(false, problem);

  const std::vector<std::string> page{"```bash", "ls", "```", "", "```cpp", "int main() {}", "```",
                                      "<!-- excerpt: examples/custom_layer.cpp -->", "```cpp", "}", "```"};
  const auto found = unmarked_code_blocks("docs/x.md", page);
  REQUIRE(found.size() == 1);
  CHECK(found[0].find("docs/x.md:5: a ```cpp block") == 0);
}

TEST_CASE("every relative link in README.md and docs/*.md points to a file that exists, and to a heading it has") {
  for (const auto& page : pages())
    for (const auto& problem : broken_links(page, lines_of(read(source_root / page)))) CHECK_MESSAGE(false, problem);
}

TEST_CASE("the link check names a missing file and a missing heading, and takes GitHub's anchors") {
  CHECK(github_slug("Cores: threads per compute rank") == "cores-threads-per-compute-rank");
  CHECK(github_slug("Data, tensor and pipeline parallelism: the 3D mesh") == "data-tensor-and-pipeline-parallelism-the-3d-mesh");
  CHECK(github_slug("Seed 000's synchronous backward (`--schedule sync-backward`)") ==
        "seed-000s-synchronous-backward---schedule-sync-backward");
  CHECK(anchors_of({"# Title", "## Notes", "```", "# not a heading", "```", "## Notes"}) ==
        std::set<std::string>{"title", "notes", "notes-1"});

  const std::vector<std::string> page{
      "# Title",
      "See [here](#title), [the README](../README.md#folders), [the web](https://example.com/x.md) and `[no](link.md)`.",
      "Gone: [a page](missing.md), [a heading](../README.md#no-such-heading) and [this page's](#nothing).",
  };
  const auto found = broken_links("docs/x.md", page);
  REQUIRE(found.size() == 3);
  CHECK(found[0] == "docs/x.md:3: link to missing.md: no file docs/missing.md");
  CHECK(found[1] == "docs/x.md:3: link to ../README.md#no-such-heading: no heading of README.md has the anchor #no-such-heading");
  CHECK(found[2] == "docs/x.md:3: link to #nothing: no heading of docs/x.md has the anchor #nothing");
}

#include "data/text_corpus.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>

#include "data/token_windows.hpp"

namespace ap {

namespace fs = std::filesystem;

namespace {

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

void append_file(const fs::path& file, std::vector<std::uint8_t>& all) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read text file " + file.string());
  all.insert(all.end(), std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  if (in.bad()) throw std::runtime_error("cannot read text file " + file.string());
}

}  // namespace

text_corpus load_text_corpus(const std::string& path) {
  text_corpus corpus;
  corpus.source = path;
  std::error_code error;
  const fs::file_status status = fs::status(path, error);
  if (error || !fs::exists(status))
    throw std::runtime_error("text corpus " + path + ": no such file or folder");
  std::vector<fs::path> files;
  if (fs::is_directory(status)) {
    for (const auto& entry : fs::directory_iterator(path)) {
      const std::string name = entry.path().filename().string();
      if (entry.is_symlink() || !entry.is_regular_file() || ends_with(name, ".dat") || ends_with(name, ".u8")) continue;
      files.push_back(entry.path());
    }
    std::sort(files.begin(), files.end());
  } else {
    files.push_back(path);
  }
  std::vector<std::uint8_t> all;
  for (const auto& f : files) append_file(f, all);
  corpus.files = files.size();
  if (all.empty())
    throw std::runtime_error("text corpus " + path + " is empty (" + std::to_string(files.size()) +
                             " files, 0 bytes; a folder's .dat and .u8 files are skipped)");
  // Note [validation split].
  for (std::size_t begin = 0, block = 0; begin < all.size(); begin += text_block_bytes, ++block) {
    const auto first = all.begin() + static_cast<std::ptrdiff_t>(begin);
    const auto last = all.begin() + static_cast<std::ptrdiff_t>(std::min(all.size(), begin + text_block_bytes));
    auto& part = block % 10 == 9 ? corpus.validation : corpus.train;
    part.insert(part.end(), first, last);
  }
  return corpus;
}

void check_corpus_fills(const text_corpus& corpus, std::size_t context) {
  for (const auto* part : {&corpus.train, &corpus.validation})
    if (part->size() < context + 1)
      throw std::invalid_argument(
          "text corpus " + corpus.source + " is too short for the model's context " + std::to_string(context) +
          ": its " + (part == &corpus.train ? "training" : "validation") + " part holds " + std::to_string(part->size()) +
          " bytes, one window needs context + 1 = " + std::to_string(context + 1) +
          " (every tenth block of " + std::to_string(text_block_bytes) +
          " bytes is validation): give more text or a smaller key 'context' in --model");
}

namespace {

token_span byte_span(const std::vector<std::uint8_t>& bytes) { return token_span{bytes.data(), bytes.size(), 1, nullptr}; }

}  // namespace

// The windows of the token source: the same samples as a token file of these bytes (See Note [window starts]).
dataset text_windows(const std::vector<std::uint8_t>& bytes, std::size_t context, std::size_t count,
                     std::uint64_t seed, const std::string& name) {
  return materialise(*token_windows(byte_span(bytes), context, count, seed, 256, name));
}

dataset text_windows_in_order(const std::vector<std::uint8_t>& bytes, std::size_t context, std::size_t max_count,
                              const std::string& name) {
  return materialise(*token_windows_in_order(byte_span(bytes), context, max_count, 256, name));
}

}  // namespace ap

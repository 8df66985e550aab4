// A small GPT-2 tokenizer written as the files users have: vocab.json (the 256 byte tokens, id = byte, then
// the merges' results and <|endoftext|>) and merges.txt, one entry per line so refusals can name lines.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/bpe.hpp"

namespace ap::test {

// The merges, by rank; their results take ids 256, 257, ... in this order, then <|endoftext|>.
inline const std::vector<std::pair<std::string, std::string>> small_merges = {
    {"Ġ", "t"}, {"h", "e"}, {"Ġt", "he"}, {"i", "n"}, {"in", "g"}, {"Ġ", "Ġ"}, {"1", "2"}};
inline constexpr std::uint32_t small_end_of_text = 263;

inline std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (const char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

// The vocab.json entries, one per line: {"token": id}.
inline std::vector<std::pair<std::string, std::uint32_t>> small_vocab() {
  std::vector<std::pair<std::string, std::uint32_t>> v;
  for (unsigned b = 0; b < 256; ++b) v.emplace_back(gpt2_byte_char(static_cast<unsigned char>(b)), b);
  std::uint32_t id = 256;
  for (const auto& [a, b] : small_merges) v.emplace_back(a + b, id++);
  v.emplace_back("<|endoftext|>", id);
  return v;
}

// Line 1 is "{", entry i is on line i + 2.
inline void write_vocab(const std::filesystem::path& path,
                        const std::vector<std::pair<std::string, std::uint32_t>>& entries) {
  std::ofstream f(path, std::ios::binary);
  f << "{\n";
  for (std::size_t i = 0; i < entries.size(); ++i)
    f << json_string(entries[i].first) << ": " << entries[i].second << (i + 1 < entries.size() ? ",\n" : "\n");
  f << "}\n";
}

// Line 1 is "#version: 0.2", merge i is on line i + 2.
inline void write_merges(const std::filesystem::path& path, const std::vector<std::string>& lines) {
  std::ofstream f(path, std::ios::binary);
  f << "#version: 0.2\n";
  for (const std::string& line : lines) f << line << "\n";
}

inline std::vector<std::string> small_merge_lines() {
  std::vector<std::string> lines;
  for (const auto& [a, b] : small_merges) lines.push_back(a + " " + b);
  return lines;
}

}  // namespace ap::test

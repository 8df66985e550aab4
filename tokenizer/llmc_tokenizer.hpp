// llm.c's tokenizer file (--tokenizer_bin): a header of 256 little-endian int32 (magic 20240328, version 1 or 2,
// vocabulary size, in version 2 the end-of-text id at [3]), then per id a length byte and that many bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ap {

inline constexpr std::int32_t llmc_tokenizer_magic = 20240328;

struct llmc_tokenizer {
  std::vector<std::string> tokens;
  std::optional<std::uint32_t> end_of_text;  // version 2's header[3]

  // Reads and checks `path`. Throws std::runtime_error naming the file and the byte offset for an unreadable or
  // short file, a bad magic, version, vocabulary size or end-of-text id, an empty token, or a truncated or
  // overlong file.
  static llmc_tokenizer read(const std::string& path);

  // Throws std::out_of_range naming an id at or above the vocabulary size.
  std::string decode(const std::vector<std::uint32_t>& ids) const;
  std::size_t vocab_size() const { return tokens.size(); }
};

// Writes `tokens` (version 2 with `end_of_text`, else 1). Throws std::invalid_argument naming a token that is
// empty or over 255 bytes or a bad end-of-text id; std::runtime_error if the file cannot be written.
void write_llmc_tokenizer(const std::string& path, const std::vector<std::string>& tokens,
                          std::optional<std::uint32_t> end_of_text);

}  // namespace ap

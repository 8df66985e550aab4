// GPT-2's byte-level BPE from vocab.json (token -> id, in GPT-2's byte-to-unicode alphabet) and merges.txt
// (one merge "a b" per line, ranked by order). Text is cut by GPT-2's pattern and each piece's bytes merged by rank.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace ap {

inline constexpr const char* gpt2_pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// The character GPT-2's alphabet writes for `byte`, as UTF-8 (0x20 is "Ġ").
std::string gpt2_byte_char(unsigned char byte);

// The bytes a token written in GPT-2's alphabet stands for; std::nullopt if it holds a character outside it.
std::optional<std::string> gpt2_token_bytes(std::string_view token);

// `text` cut by GPT-2's pattern; the pieces concatenate to `text`, any bytes included (Note [invalid UTF-8]).
std::vector<std::string_view> gpt2_pretokenize(std::string_view text);

class bpe_tokenizer {
 public:
  // Reads and checks both files before anything is encoded. Throws std::runtime_error naming the file and the
  // line (or byte offset) for unreadable or malformed JSON, a bad id, a token outside GPT-2's alphabet, a missing
  // byte token, or a merge line that is not "a b" or names a token the vocabulary lacks.
  static bpe_tokenizer from_files(const std::string& vocab_path, const std::string& merges_path);

  // The ids of `text`, any bytes.
  std::vector<std::uint32_t> encode(std::string_view text) const;

  // The bytes of `ids`: decode(encode(text)) == text. Throws std::out_of_range for an id not in the vocabulary.
  std::string decode(const std::vector<std::uint32_t>& ids) const;

  std::size_t vocab_size() const { return tokens_.size(); }
  // Ids may leave gaps.
  bool has_id(std::uint32_t id) const { return id < tokens_.size() && present_[id]; }
  // Empty for a gap.
  const std::string& token_bytes(std::uint32_t id) const { return tokens_.at(id); }
  // The id of a token given in GPT-2's alphabet ("<|endoftext|>", "Ġthe"), if the vocabulary has it.
  std::optional<std::uint32_t> find_token(const std::string& token) const;
  std::size_t merge_count() const { return merges_.size(); }

 private:
  struct merge {
    std::uint32_t rank;
    std::uint32_t result;
  };
  void encode_piece(std::string_view piece, std::vector<std::uint32_t>& out) const;

  std::vector<std::string> tokens_;
  std::vector<bool> present_;
  std::unordered_map<std::string, std::uint32_t> ids_;
  std::uint32_t byte_ids_[256] = {};
  std::unordered_map<std::uint64_t, merge> merges_;  // (left id << 32 | right id) -> rank, result
};

}  // namespace ap

#include "tokenizer/bpe.hpp"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <fstream>
#include <limits>
#include <memory>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

namespace ap {

namespace {

// GPT-2's bytes_to_unicode: the byte's code point in its alphabet.
std::uint32_t byte_code_point(unsigned char b) {
  if ((b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE)) return b;
  std::uint32_t n = 0;  // the others, in byte order, from U+0100
  for (unsigned c = 0; c < b; ++c)
    if (!((c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE))) ++n;
  return 256 + n;
}

std::string utf8(std::uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

struct alphabet {
  std::string chars[256];
  std::unordered_map<std::uint32_t, unsigned char> bytes;
  alphabet() {
    for (unsigned b = 0; b < 256; ++b) {
      const std::uint32_t cp = byte_code_point(static_cast<unsigned char>(b));
      chars[b] = utf8(cp);
      bytes[cp] = static_cast<unsigned char>(b);
    }
  }
};

const alphabet& gpt2_alphabet() {
  static const alphabet a;
  return a;
}

[[noreturn]] void fail(const std::string& what) { throw std::runtime_error(what); }

std::string read_file(const std::string& path, const char* what) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail(std::string(what) + " " + path + ": cannot be read");
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

// The line (from 1) of the key `token` in the JSON text, 0 if not found.
std::size_t line_of_key(const std::string& text, const std::string& token) {
  for (bool ascii : {false, true}) {
    const std::string quoted = nlohmann::json(token).dump(-1, ' ', ascii);
    for (std::size_t at = text.find(quoted); at != std::string::npos; at = text.find(quoted, at + 1)) {
      std::size_t after = at + quoted.size();
      while (after < text.size() && std::isspace(static_cast<unsigned char>(text[after]))) ++after;
      if (after < text.size() && text[after] == ':')
        return 1 + static_cast<std::size_t>(std::count(text.begin(), text.begin() + at, '\n'));
    }
  }
  return 0;
}

std::string at_key(const std::string& path, const std::string& text, const std::string& token) {
  const std::size_t line = line_of_key(text, token);
  return "vocab.json " + path + (line ? " line " + std::to_string(line) : std::string()) + ": token " +
         nlohmann::json(token).dump();
}

// Ids at or above this are refused: the tokenizer keeps a table indexed by id.
constexpr std::uint64_t id_limit = std::uint64_t{1} << 24;

// Note [invalid UTF-8]: GPT-2's pattern needs PCRE2's UTF mode, but the text may be any bytes. Compiled with
// PCRE2_MATCH_INVALID_UTF, an invalid sequence matches nothing and its bytes become pieces of their own, so
// the pieces always concatenate to the text and decode(encode(text)) == text for any bytes; valid text is cut
// exactly as GPT-2 cuts it.
struct compiled_pattern {
  pcre2_code* code = nullptr;
  compiled_pattern() {
    int error = 0;
    PCRE2_SIZE offset = 0;
    code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(gpt2_pattern), PCRE2_ZERO_TERMINATED,
                         PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &error, &offset, nullptr);
    if (!code) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(error, message, sizeof message);
      throw std::logic_error("GPT-2's pattern does not compile at " + std::to_string(offset) + ": " +
                             reinterpret_cast<const char*>(message));
    }
    pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  }
  ~compiled_pattern() { pcre2_code_free(code); }
};

const pcre2_code* pattern() {
  static const compiled_pattern p;
  return p.code;
}

}  // namespace

std::string gpt2_byte_char(unsigned char byte) { return gpt2_alphabet().chars[byte]; }

std::optional<std::string> gpt2_token_bytes(std::string_view token) {
  const alphabet& a = gpt2_alphabet();
  std::string out;
  for (std::size_t i = 0; i < token.size();) {
    const auto c = static_cast<unsigned char>(token[i]);
    std::uint32_t cp;
    std::size_t n;
    if (c < 0x80) cp = c, n = 1;
    else if ((c & 0xE0) == 0xC0) cp = c & 0x1F, n = 2;
    else if ((c & 0xF0) == 0xE0) cp = c & 0x0F, n = 3;
    else return std::nullopt;  // the alphabet ends at U+0143
    if (i + n > token.size()) return std::nullopt;
    for (std::size_t k = 1; k < n; ++k) {
      const auto d = static_cast<unsigned char>(token[i + k]);
      if ((d & 0xC0) != 0x80) return std::nullopt;
      cp = (cp << 6) | (d & 0x3F);
    }
    const auto it = a.bytes.find(cp);
    if (it == a.bytes.end() || utf8(cp) != token.substr(i, n)) return std::nullopt;
    out += static_cast<char>(it->second);
    i += n;
  }
  return out;
}

std::vector<std::string_view> gpt2_pretokenize(std::string_view text) {
  // See Note [invalid UTF-8].
  std::vector<std::string_view> pieces;
  const pcre2_code* code = pattern();
  std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> match(
      pcre2_match_data_create_from_pattern(code, nullptr), &pcre2_match_data_free);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  std::size_t pos = 0;
  while (pos < text.size()) {
    const int rc = pcre2_match(code, subject, text.size(), pos, 0, match.get(), nullptr);
    std::size_t start = text.size(), end = text.size();
    if (rc >= 0) {
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(match.get());
      start = ov[0], end = ov[1];
    } else if (rc != PCRE2_ERROR_NOMATCH) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(rc, message, sizeof message);
      throw std::runtime_error("pre-tokenising at byte " + std::to_string(pos) + ": " +
                               reinterpret_cast<const char*>(message));
    }
    for (; pos < start; ++pos) pieces.push_back(text.substr(pos, 1));
    if (end > start) pieces.push_back(text.substr(start, end - start));
    pos = std::max(pos, end);
  }
  return pieces;
}

bpe_tokenizer bpe_tokenizer::from_files(const std::string& vocab_path, const std::string& merges_path) {
  bpe_tokenizer t;
  const std::string vocab_text = read_file(vocab_path, "vocab.json");
  const std::string merges_text = read_file(merges_path, "merges.txt");
  nlohmann::json vocab;
  try {
    vocab = nlohmann::json::parse(vocab_text);
  } catch (const nlohmann::json::parse_error& e) {
    fail("vocab.json " + vocab_path + ": not JSON: " + e.what());
  }
  if (!vocab.is_object())
    fail("vocab.json " + vocab_path + ": expected a JSON object of token -> id, got " +
         std::string(vocab.type_name()));
  std::uint64_t largest = 0;
  for (const auto& [token, id] : vocab.items()) {
    if (!id.is_number_integer() || (!id.is_number_unsigned() && id.get<std::int64_t>() < 0))
      fail(at_key(vocab_path, vocab_text, token) + ": its id " + id.dump() + " is not a non-negative integer");
    if (id.get<std::uint64_t>() >= id_limit)
      fail(at_key(vocab_path, vocab_text, token) + ": its id " + id.dump() + " is not below " +
           std::to_string(id_limit));
    largest = std::max(largest, id.get<std::uint64_t>());
  }
  t.tokens_.assign(vocab.empty() ? 0 : largest + 1, std::string());
  t.present_.assign(t.tokens_.size(), false);
  std::vector<const std::string*> names(t.tokens_.size(), nullptr);
  for (const auto& [token, value] : vocab.items()) {
    const auto id = value.get<std::uint32_t>();
    if (t.present_[id]) {
      // Name the later of the two in the file, and the other.
      const std::size_t here = line_of_key(vocab_text, token), there = line_of_key(vocab_text, *names[id]);
      const std::string& later = here >= there ? token : *names[id];
      const std::string& earlier = here >= there ? *names[id] : token;
      fail(at_key(vocab_path, vocab_text, later) + ": its id " + std::to_string(id) + " is also the id of " +
           nlohmann::json(earlier).dump());
    }
    std::optional<std::string> bytes = gpt2_token_bytes(token);
    if (!bytes || bytes->empty())
      fail(at_key(vocab_path, vocab_text, token) + ": " +
           (bytes ? std::string("is empty") : std::string("holds a character outside GPT-2's byte alphabet")));
    t.present_[id] = true;
    t.tokens_[id] = std::move(*bytes);
    names[id] = &token;
    t.ids_.emplace(token, id);
  }
  for (unsigned b = 0; b < 256; ++b) {
    const auto it = t.ids_.find(gpt2_byte_char(static_cast<unsigned char>(b)));
    if (it == t.ids_.end()) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "0x%02X", b);
      fail("vocab.json " + vocab_path + ": lacks the token of byte " + hex + " (" +
           nlohmann::json(gpt2_byte_char(static_cast<unsigned char>(b))).dump() +
           "): byte-level BPE needs all 256 byte tokens");
    }
    t.byte_ids_[b] = it->second;
  }

  std::istringstream lines(merges_text);
  std::string line;
  std::uint32_t rank = 0;
  for (std::size_t number = 1; std::getline(lines, line); ++number) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (number == 1 && line.rfind("#version", 0) == 0) continue;
    if (line.empty()) continue;
    const std::string where = "merges.txt " + merges_path + " line " + std::to_string(number) + ": ";
    const std::size_t space = line.find(' ');
    if (space == std::string::npos || space == 0 || space + 1 == line.size() ||
        line.find(' ', space + 1) != std::string::npos)
      fail(where + "expected two tokens separated by one space, got " + nlohmann::json(line).dump());
    const std::string a = line.substr(0, space), b = line.substr(space + 1);
    const auto ia = t.ids_.find(a), ib = t.ids_.find(b), ir = t.ids_.find(a + b);
    for (const auto& [it, token] : {std::pair{ia, &a}, std::pair{ib, &b}})
      if (it == t.ids_.end())
        fail(where + "the merge " + nlohmann::json(line).dump() + " names " + nlohmann::json(*token).dump() +
             ", which the vocabulary " + vocab_path + " lacks");
    if (ir == t.ids_.end())
      fail(where + "the merge " + nlohmann::json(line).dump() + " makes " + nlohmann::json(a + b).dump() +
           ", which the vocabulary " + vocab_path + " lacks");
    const std::uint64_t key = (std::uint64_t{ia->second} << 32) | ib->second;
    t.merges_.emplace(key, merge{rank++, ir->second});
  }
  return t;
}

void bpe_tokenizer::encode_piece(std::string_view piece, std::vector<std::uint32_t>& out) const {
  std::vector<std::uint32_t> word;
  word.reserve(piece.size());
  for (const char c : piece) word.push_back(byte_ids_[static_cast<unsigned char>(c)]);
  std::vector<std::uint32_t> next;
  while (word.size() > 1) {
    // The adjacent pair of the lowest rank, every occurrence merged left to right (as GPT-2 does).
    std::uint32_t best_rank = std::numeric_limits<std::uint32_t>::max();
    std::uint64_t best_key = 0;
    std::uint32_t best_result = 0;
    for (std::size_t i = 0; i + 1 < word.size(); ++i) {
      const std::uint64_t key = (std::uint64_t{word[i]} << 32) | word[i + 1];
      const auto it = merges_.find(key);
      if (it != merges_.end() && it->second.rank < best_rank)
        best_rank = it->second.rank, best_key = key, best_result = it->second.result;
    }
    if (best_rank == std::numeric_limits<std::uint32_t>::max()) break;
    next.clear();
    for (std::size_t i = 0; i < word.size(); ++i) {
      if (i + 1 < word.size() && ((std::uint64_t{word[i]} << 32) | word[i + 1]) == best_key) {
        next.push_back(best_result);
        ++i;
      } else {
        next.push_back(word[i]);
      }
    }
    word.swap(next);
  }
  out.insert(out.end(), word.begin(), word.end());
}

std::vector<std::uint32_t> bpe_tokenizer::encode(std::string_view text) const {
  std::vector<std::uint32_t> ids;
  ids.reserve(text.size() / 3);
  // A piece's ids are remembered for the rest of this call: words repeat.
  std::unordered_map<std::string_view, std::pair<std::size_t, std::size_t>> seen;
  std::vector<std::uint32_t> known;
  for (const std::string_view piece : gpt2_pretokenize(text)) {
    const auto it = seen.find(piece);
    if (it != seen.end()) {
      ids.insert(ids.end(), known.begin() + it->second.first, known.begin() + it->second.second);
      continue;
    }
    const std::size_t first = ids.size();
    encode_piece(piece, ids);
    if (piece.size() <= 64) {
      seen.emplace(piece, std::pair{known.size(), known.size() + (ids.size() - first)});
      known.insert(known.end(), ids.begin() + first, ids.end());
    }
  }
  return ids;
}

std::string bpe_tokenizer::decode(const std::vector<std::uint32_t>& ids) const {
  std::string text;
  for (const std::uint32_t id : ids) {
    if (!has_id(id))
      throw std::out_of_range("token id " + std::to_string(id) + " is not in the vocabulary (ids below " +
                              std::to_string(tokens_.size()) + ")");
    text += tokens_[id];
  }
  return text;
}

std::optional<std::uint32_t> bpe_tokenizer::find_token(const std::string& token) const {
  const auto it = ids_.find(token);
  if (it == ids_.end()) return std::nullopt;
  return it->second;
}

}  // namespace ap

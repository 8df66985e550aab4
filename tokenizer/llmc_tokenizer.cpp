#include "tokenizer/llmc_tokenizer.hpp"

#include <fstream>
#include <iterator>
#include <limits>
#include <stdexcept>

namespace ap {

namespace {

constexpr std::size_t header_ints = 256;
constexpr std::size_t header_bytes = header_ints * 4;

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw std::runtime_error("llm.c tokenizer file " + path + ": " + what);
}

std::int32_t little_endian_int32(const unsigned char* p) {
  return static_cast<std::int32_t>(std::uint32_t{p[0]} | std::uint32_t{p[1]} << 8 | std::uint32_t{p[2]} << 16 |
                                   std::uint32_t{p[3]} << 24);
}

void put_int32(std::string& out, std::int32_t v) {
  const auto u = static_cast<std::uint32_t>(v);
  for (int shift = 0; shift < 32; shift += 8) out += static_cast<char>((u >> shift) & 0xFF);
}

}  // namespace

llmc_tokenizer llmc_tokenizer::read(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail(path, "cannot be read");
  const std::string data((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const auto* bytes = reinterpret_cast<const unsigned char*>(data.data());
  if (data.size() < header_bytes)
    fail(path, "truncated at byte " + std::to_string(data.size()) + ": the header is " +
                   std::to_string(header_bytes) + " bytes");
  const std::int32_t magic = little_endian_int32(bytes), version = little_endian_int32(bytes + 4),
                     size = little_endian_int32(bytes + 8);
  if (magic != llmc_tokenizer_magic)
    fail(path, "magic " + std::to_string(magic) + " at byte 0, expected " + std::to_string(llmc_tokenizer_magic));
  if (version != 1 && version != 2)
    fail(path, "unsupported version " + std::to_string(version) + " at byte 4 (1 and 2 are read)");
  if (size <= 0) fail(path, "vocabulary size " + std::to_string(size) + " at byte 8 is not positive");
  llmc_tokenizer t;
  if (version == 2) {
    const std::int32_t eot = little_endian_int32(bytes + 12);
    if (eot < 0 || eot >= size)
      fail(path, "end-of-text id " + std::to_string(eot) + " at byte 12 is not below the vocabulary size " +
                     std::to_string(size));
    t.end_of_text = static_cast<std::uint32_t>(eot);
  }
  t.tokens.reserve(static_cast<std::size_t>(size));
  std::size_t at = header_bytes;
  for (std::int32_t id = 0; id < size; ++id) {
    if (at >= data.size())
      fail(path, "truncated at byte " + std::to_string(at) + ": the length of token " + std::to_string(id) +
                     " of " + std::to_string(size) + " is missing");
    const std::size_t length = bytes[at];
    if (length == 0) fail(path, "token " + std::to_string(id) + " at byte " + std::to_string(at) + " has length 0");
    if (at + 1 + length > data.size())
      fail(path, "truncated at byte " + std::to_string(data.size()) + ": token " + std::to_string(id) + " at byte " +
                     std::to_string(at) + " needs " + std::to_string(length) + " bytes");
    t.tokens.push_back(data.substr(at + 1, length));
    at += 1 + length;
  }
  if (at != data.size())
    fail(path, std::to_string(data.size() - at) + " bytes after the last token, from byte " + std::to_string(at));
  return t;
}

std::string llmc_tokenizer::decode(const std::vector<std::uint32_t>& ids) const {
  std::string text;
  for (const std::uint32_t id : ids) {
    if (id >= tokens.size())
      throw std::out_of_range("token id " + std::to_string(id) + " is not below the tokenizer's vocabulary size " +
                              std::to_string(tokens.size()));
    text += tokens[id];
  }
  return text;
}

void write_llmc_tokenizer(const std::string& path, const std::vector<std::string>& tokens,
                          std::optional<std::uint32_t> end_of_text) {
  if (tokens.empty() || tokens.size() > std::size_t(std::numeric_limits<std::int32_t>::max()))
    throw std::invalid_argument("llm.c tokenizer file " + path + ": " + std::to_string(tokens.size()) +
                                " tokens (1 to 2^31 - 1 are written)");
  if (end_of_text && *end_of_text >= tokens.size())
    throw std::invalid_argument("llm.c tokenizer file " + path + ": end-of-text id " + std::to_string(*end_of_text) +
                                " is not below the vocabulary size " + std::to_string(tokens.size()));
  std::string out;
  out.reserve(header_bytes + tokens.size() * 8);
  put_int32(out, llmc_tokenizer_magic);
  put_int32(out, end_of_text ? 2 : 1);
  put_int32(out, static_cast<std::int32_t>(tokens.size()));
  put_int32(out, end_of_text ? static_cast<std::int32_t>(*end_of_text) : 0);
  out.resize(header_bytes, '\0');
  for (std::size_t id = 0; id < tokens.size(); ++id) {
    if (tokens[id].empty() || tokens[id].size() > 255)
      throw std::invalid_argument("llm.c tokenizer file " + path + ": token " + std::to_string(id) + " has " +
                                  std::to_string(tokens[id].size()) + " bytes (1 to 255 are written)");
    out += static_cast<char>(tokens[id].size());
    out += tokens[id];
  }
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(out.data(), static_cast<std::streamsize>(out.size()));
  if (!f.flush()) throw std::runtime_error("llm.c tokenizer file " + path + ": cannot be written");
}

}  // namespace ap

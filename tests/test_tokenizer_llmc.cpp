// llm.c's tokenizer file: written from a BPE vocabulary and read back (versions 1 and 2), decoding, and its
// refusals with the byte offset.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

#include "test_support.hpp"
#include "tokenizer/bpe.hpp"
#include "tokenizer/llmc_tokenizer.hpp"
#include "tokenizer_files.hpp"

using namespace ap;

namespace {

std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(bytes.data(), std::streamsize(bytes.size()));
}

void put_int32(std::string& bytes, std::size_t offset, std::int32_t v) {
  for (int i = 0; i < 4; ++i) bytes[offset + i] = static_cast<char>((static_cast<std::uint32_t>(v) >> (8 * i)) & 0xFF);
}

std::string refusal(const std::string& path) {
  try {
    llmc_tokenizer::read(path);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  FAIL("the file was accepted");
  return "";
}

}  // namespace

TEST_CASE("llm.c's tokenizer file from a BPE vocabulary: written, read back, decoded") {
  test::scratch_dir dir{"tokenizer_llmc"};
  const std::string vocab = (dir.path / "vocab.json").string(), merges = (dir.path / "merges.txt").string(),
                    file = (dir.path / "tokenizer.bin").string();
  test::write_vocab(vocab, test::small_vocab());
  test::write_merges(merges, test::small_merge_lines());
  const bpe_tokenizer bpe = bpe_tokenizer::from_files(vocab, merges);
  std::vector<std::string> tokens;
  for (std::uint32_t id = 0; id < bpe.vocab_size(); ++id) tokens.push_back(bpe.token_bytes(id));
  write_llmc_tokenizer(file, tokens, test::small_end_of_text);

  const std::string bytes = read_bytes(file);
  // The header: magic, version 2, vocabulary size, end of text; then "\x01" "\x00" for token 0.
  REQUIRE(bytes.size() > 1024);
  CHECK(bytes.substr(0, 16) == std::string("\xc8\xd7\x34\x01" "\x02\x00\x00\x00" "\x08\x01\x00\x00" "\x07\x01\x00\x00", 16));
  CHECK(bytes.substr(1024, 2) == std::string("\x01\x00", 2));
  CHECK(bytes.size() == 1024 + 256 * 2 + (1 + 2) * 5 + (1 + 4) + (1 + 3) + (1 + 13));  // " t" "he" "in" "  " "12", " the", "ing", <|endoftext|>

  const llmc_tokenizer t = llmc_tokenizer::read(file);
  CHECK(t.vocab_size() == 264);
  CHECK(t.end_of_text == test::small_end_of_text);
  CHECK(t.tokens == tokens);
  const std::string text = "the thing 123\xFF  \n";
  CHECK(t.decode(bpe.encode(text)) == text);
  CHECK(t.decode({test::small_end_of_text}) == "<|endoftext|>");
  CHECK_THROWS_WITH_AS(t.decode({1, 264}), doctest::Contains("token id 264 is not below the tokenizer's vocabulary size 264"),
                       std::out_of_range);

  write_llmc_tokenizer(file, {"a", "bc"}, std::nullopt);  // version 1: no end of text
  const llmc_tokenizer v1 = llmc_tokenizer::read(file);
  CHECK(v1.tokens == std::vector<std::string>{"a", "bc"});
  CHECK(!v1.end_of_text);
  CHECK(read_bytes(file).substr(4, 4) == std::string("\x01\x00\x00\x00", 4));
}

TEST_CASE("llm.c's tokenizer file refusals name the file and the byte offset") {
  test::scratch_dir dir{"tokenizer_llmc_bad"};
  const std::string file = (dir.path / "tokenizer.bin").string();
  write_llmc_tokenizer(file, {"a", "bc", "def"}, 2);
  const std::string good = read_bytes(file);  // 1024 + 2 + 3 + 4 bytes
  REQUIRE(good.size() == 1033);
  std::string bad = good;
  SUBCASE("wrong magic") {
    put_int32(bad, 0, 20240520);  // a token file's magic
    write_bytes(file, bad);
    CHECK(test::contains(refusal(file), file + ": magic 20240520 at byte 0, expected 20240328"));
  }
  SUBCASE("wrong version") {
    put_int32(bad, 4, 3);
    write_bytes(file, bad);
    CHECK(test::contains(refusal(file), file + ": unsupported version 3 at byte 4"));
  }
  SUBCASE("a vocabulary size that is not positive") {
    put_int32(bad, 8, 0);
    write_bytes(file, bad);
    CHECK(test::contains(refusal(file), file + ": vocabulary size 0 at byte 8"));
  }
  SUBCASE("an end-of-text id at or above the vocabulary size") {
    put_int32(bad, 12, 3);
    write_bytes(file, bad);
    CHECK(test::contains(refusal(file), file + ": end-of-text id 3 at byte 12 is not below the vocabulary size 3"));
  }
  SUBCASE("truncated in the header") {
    write_bytes(file, good.substr(0, 1000));
    CHECK(test::contains(refusal(file), file + ": truncated at byte 1000: the header is 1024 bytes"));
  }
  SUBCASE("truncated inside a token") {
    write_bytes(file, good.substr(0, 1031));
    CHECK(test::contains(refusal(file), file + ": truncated at byte 1031: token 2 at byte 1029 needs 3 bytes"));
  }
  SUBCASE("truncated before a token's length") {
    write_bytes(file, good.substr(0, 1029));
    CHECK(test::contains(refusal(file), file + ": truncated at byte 1029: the length of token 2 of 3 is missing"));
  }
  SUBCASE("a token of length 0") {
    bad[1026] = 0;
    write_bytes(file, bad);
    CHECK(test::contains(refusal(file), file + ": token 1 at byte 1026 has length 0"));
  }
  SUBCASE("bytes after the last token") {
    write_bytes(file, good + "xy");
    CHECK(test::contains(refusal(file), file + ": 2 bytes after the last token, from byte 1033"));
  }
  SUBCASE("a file that cannot be read") {
    CHECK(test::contains(refusal(file + ".missing"), file + ".missing: cannot be read"));
  }
  SUBCASE("the writer refuses what the format cannot hold") {
    CHECK_THROWS_WITH_AS(write_llmc_tokenizer(file, {"a", ""}, std::nullopt),
                         doctest::Contains("token 1 has 0 bytes (1 to 255 are written)"), std::invalid_argument);
    CHECK_THROWS_WITH_AS(write_llmc_tokenizer(file, {"a", std::string(256, 'x')}, std::nullopt),
                         doctest::Contains("token 1 has 256 bytes"), std::invalid_argument);
    CHECK_THROWS_WITH_AS(write_llmc_tokenizer(file, {"a"}, 1), doctest::Contains("end-of-text id 1 is not below"),
                         std::invalid_argument);
  }
}

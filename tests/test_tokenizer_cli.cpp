// `actorpipe tokenize` end to end (llm.c's token file and a raw one, a validation split, llm.c's tokenizer file,
// refusals), and `actorpipe generate` decoding through a tokenizer: with a tokenizer whose ids are the bytes it
// prints what the byte model prints.
#include <doctest/doctest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "node_process.hpp"
#include "cli_runs.hpp"
#include "test_support.hpp"
#include "tokenizer/llmc_tokenizer.hpp"
#include "tokenizer_files.hpp"

using namespace ap;
using namespace std::chrono_literals;
using ids = std::vector<std::uint32_t>;

namespace {

// `actorpipe ARGS...` to its end: its exit code, its first stdout line, its stderr.
struct result {
  int code;
  std::string out, err;
};

result run(const std::vector<std::string>& args) {
  const test::program_run r = test::run_actorpipe(args);
  return {r.code, r.lines.empty() ? std::string() : r.lines.front(), r.err};
}

std::string read_bytes(const std::filesystem::path& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

std::uint32_t little_endian(const std::string& bytes, std::size_t offset, int width) {
  std::uint32_t v = 0;
  for (int i = 0; i < width; ++i) v |= std::uint32_t(static_cast<unsigned char>(bytes[offset + i])) << (8 * i);
  return v;
}

ids values(const std::string& bytes, std::size_t offset, int width) {
  ids out;
  for (std::size_t at = offset; at + width <= bytes.size(); at += width) out.push_back(little_endian(bytes, at, width));
  return out;
}

struct corpus {
  test::scratch_dir dir{"tokenizer_cli"};
  std::filesystem::path vocab = dir.path / "vocab.json", merges = dir.path / "merges.txt", text = dir.path / "text";
  corpus() {
    test::write_vocab(vocab, test::small_vocab());
    test::write_merges(merges, test::small_merge_lines());
    std::filesystem::create_directories(text / "sub");
    std::ofstream(text / "a.txt") << "the thing";
    std::ofstream(text / "sub" / "b.txt") << " the 12";
    std::ofstream(text / ".hidden") << "skipped";
  }
  std::vector<std::string> args(const std::filesystem::path& output) const {
    return {"tokenize", "--vocab", vocab.string(), "--merges", merges.string(), "--input", text.string(), "--output",
            output.string()};
  }
};

// <|endoftext|> before each file; "the thing" and " the 12" by hand (test_tokenizer_bpe's encodings).
const ids expected = {263, 't', 257, 256, 'h', 260, 263, 258, ' ', 262};

}  // namespace

TEST_CASE("tokenize writes llm.c's token file of a folder's files, each after <|endoftext|>") {
  corpus c;
  const auto output = c.dir.path / "tokens.bin", tokenizer = c.dir.path / "tokenizer.bin";
  auto args = c.args(output);
  args.insert(args.end(), {"--tokenizer-output", tokenizer.string()});
  const result r = run(args);
  INFO(r.err);
  REQUIRE(r.code == 0);
  CHECK(test::contains(r.out, "\"tokens\":10"));
  CHECK(test::contains(r.out, "\"files\":2"));
  CHECK(test::contains(r.out, "\"bytes\":16"));
  CHECK(test::contains(r.out, "\"seconds\":"));
  const std::string bytes = read_bytes(output);
  REQUIRE(bytes.size() == 1024 + 10 * 2);
  CHECK(little_endian(bytes, 0, 4) == 20240520);
  CHECK(little_endian(bytes, 4, 4) == 1);
  CHECK(little_endian(bytes, 8, 4) == 10);
  CHECK(values(bytes.substr(0, 1024), 12, 4) == ids(253, 0));
  CHECK(values(bytes, 1024, 2) == expected);
  const llmc_tokenizer t = llmc_tokenizer::read(tokenizer.string());
  CHECK(t.vocab_size() == 264);
  CHECK(t.end_of_text == test::small_end_of_text);
  CHECK(t.decode(expected) == "<|endoftext|>the thing<|endoftext|> the 12");
  for (const auto& entry : std::filesystem::directory_iterator(c.dir.path))
    CHECK(!test::contains(entry.path().filename().string(), ".partial."));
}

TEST_CASE("tokenize writes raw uint32 tokens and a validation file of the last tokens") {
  corpus c;
  const auto output = c.dir.path / "train.u32", validation = c.dir.path / "val.u32";
  auto args = c.args(output);
  args.insert(args.end(), {"--format", "raw", "--token-bytes", "4", "--validation-fraction", "0.2",
                           "--validation-output", validation.string()});
  const result r = run(args);
  INFO(r.err);
  REQUIRE(r.code == 0);
  CHECK(test::contains(r.out, "\"tokens\":10"));
  CHECK(test::contains(r.out, "\"validation_tokens\":2"));
  CHECK(values(read_bytes(output), 0, 4) == ids(expected.begin(), expected.end() - 2));
  CHECK(values(read_bytes(validation), 0, 4) == ids(expected.end() - 2, expected.end()));
  CHECK(read_bytes(output).size() == 8 * 4);
}

TEST_CASE("tokenize refuses bad files and flags before writing anything") {
  corpus c;
  const auto output = c.dir.path / "tokens.bin";
  SUBCASE("a malformed merges line names the file and the line") {
    test::write_merges(c.merges, {"Ġ t", "h e x"});
    const result r = run(c.args(output));
    CHECK(r.code == 1);
    CHECK(test::contains(r.err, c.merges.string() + " line 3: expected two tokens"));
  }
  SUBCASE("an id that does not fit uint16 is named") {
    auto entries = test::small_vocab();
    entries[256].second = 70000;  // "Ġt"
    test::write_vocab(c.vocab, entries);
    const result r = run(c.args(output));
    CHECK(r.code == 1);
    CHECK(test::contains(r.err, "token id 70000 (token 2 of " + (c.text / "a.txt").string() +
                                    ") does not fit --token-bytes 2"));
  }
  SUBCASE("llm.c's token file holds uint16 only") {
    auto args = c.args(output);
    args.insert(args.end(), {"--token-bytes", "4"});
    const result r = run(args);
    CHECK(r.code == 1);
    CHECK(test::contains(r.err, "--token-bytes 4 with --format llmc"));
  }
  SUBCASE("a missing input") {
    auto args = c.args(output);
    args[6] = (c.dir.path / "nothing").string();
    const result r = run(args);
    CHECK(r.code == 1);
    CHECK(test::contains(r.err, "--input " + args[6] + ": no such file or folder"));
  }
  CHECK(!std::filesystem::exists(output));
}

TEST_CASE("generate decodes through a tokenizer: byte ids print what the byte model prints") {
  test::scratch_dir dir{"tokenizer_generate"};
  const std::string text = (dir.path / "text.txt").string(), checkpoint = (dir.path / "gpt.safetensors").string();
  {
    std::ofstream f(text);
    for (int i = 0; i < 1200; ++i) f << "the quick brown fox jumps over the lazy dog " << i << "\n";
  }
  const result trained = run({"train", "--model", "gpt:layers=1,dim=16,heads=2,context=8", "--text", text,
                              "--batch-size", "6", "--max-steps", "5", "--checkpoint", checkpoint});
  INFO(trained.err);
  REQUIRE(trained.code == 0);
  // A vocabulary of the 256 bytes (id = byte) and <|endoftext|> (256, beyond the model's 256), no merges.
  const auto vocab = dir.path / "vocab.json", merges = dir.path / "merges.txt", tokenizer = dir.path / "tok.bin";
  auto entries = test::small_vocab();
  entries.resize(256);
  entries.emplace_back("<|endoftext|>", 256);
  test::write_vocab(vocab, entries);
  test::write_merges(merges, {});
  std::vector<std::string> bytes;
  for (int b = 0; b < 256; ++b) bytes.emplace_back(1, static_cast<char>(b));
  write_llmc_tokenizer(tokenizer.string(), bytes, std::nullopt);

  const std::vector<std::string> base = {"generate", "--checkpoint", checkpoint, "--tokens", "12", "--seed", "3"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = base;
    args.insert(args.end(), extra.begin(), extra.end());
    return run(args);
  };
  const result byte_prompt = with({"--prompt", "the "});
  REQUIRE(byte_prompt.code == 0);
  CHECK(byte_prompt.out.rfind("the ", 0) == 0);
  const result bpe_prompt = with({"--prompt", "the ", "--vocab", vocab.string(), "--merges", merges.string()});
  INFO(bpe_prompt.err);
  CHECK(bpe_prompt.code == 0);
  CHECK(bpe_prompt.out == byte_prompt.out);
  // Without a prompt: <|endoftext|> is not among the model's ids, so both start from "\n".
  const result byte_free = with({"--temperature", "0"});
  const result llmc_free = with({"--temperature", "0", "--tokenizer", tokenizer.string()});
  INFO(llmc_free.err);
  CHECK(llmc_free.code == 0);
  CHECK(llmc_free.out == byte_free.out);
  const result refused = with({"--prompt", "x", "--tokenizer", tokenizer.string()});
  CHECK(refused.code == 1);
  CHECK(test::contains(refused.err, "llm.c's tokenizer file only decodes"));
}

// `actorpipe tokenize`: text through GPT-2's BPE into a token file (llm.c's .bin or a raw uint16/uint32 array),
// optionally a validation file and llm.c's tokenizer file. Prints one JSON line.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/checks.hpp"
#include "cli/commands.hpp"
#include "data/token_file.hpp"
#include "tokenizer/bpe.hpp"
#include "tokenizer/llmc_tokenizer.hpp"

namespace ap::cli {
namespace {

namespace fs = std::filesystem;

struct tokenize_options {
  std::string vocab, merges, input, output;
  std::string format = "llmc";
  int token_bytes = 2;
  double validation_fraction = 0.0;
  std::string validation_output;
  std::string tokenizer_output;
};

// `input`, or a folder's regular files recursively (dot-files skipped), in path order.
std::vector<fs::path> input_files(const std::string& input) {
  std::error_code ec;
  if (fs::is_regular_file(input, ec)) return {fs::path(input)};
  if (!fs::is_directory(input, ec))
    throw std::invalid_argument("--input " + input + ": no such file or folder");
  std::vector<fs::path> files;
  for (auto it = fs::recursive_directory_iterator(input); it != fs::recursive_directory_iterator(); ++it) {
    if (it->path().filename().string().rfind('.', 0) == 0) {
      if (it->is_directory()) it.disable_recursion_pending();
      continue;
    }
    if (it->is_regular_file()) files.push_back(it->path());
  }
  std::sort(files.begin(), files.end());
  if (files.empty()) throw std::invalid_argument("--input " + input + ": the folder holds no files");
  return files;
}

std::string read_text(const fs::path& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("--input: " + path.string() + " cannot be read");
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

void put_le(std::string& out, std::uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out += static_cast<char>((v >> (8 * i)) & 0xFF);
}

// Writes `bytes` to a temporary file next to `path`, then renames it: `path` is whole or untouched.
void write_whole(const std::string& path, const std::string& bytes) {
  const std::string temporary = path + ".partial." + std::to_string(::getpid());
  {
    std::ofstream f(temporary, std::ios::binary | std::ios::trunc);
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!f.flush()) {
      std::remove(temporary.c_str());
      throw std::runtime_error(path + ": cannot be written");
    }
  }
  std::error_code ec;
  fs::rename(temporary, path, ec);
  if (ec) {
    std::remove(temporary.c_str());
    throw std::runtime_error(path + ": cannot be written: " + ec.message());
  }
}

// The file's bytes: llm.c's header (magic, version 1, count) then uint16 tokens, or the raw array.
std::string token_file_bytes(const std::vector<std::uint32_t>& tokens, std::size_t first, std::size_t count,
                             const tokenize_options& o) {
  std::string out;
  out.reserve((o.format == "llmc" ? llmc_header_bytes : 0) + count * std::size_t(o.token_bytes));
  if (o.format == "llmc") {
    put_le(out, static_cast<std::uint32_t>(llmc_magic), 4);
    put_le(out, 1, 4);
    put_le(out, count, 4);
    out.resize(llmc_header_bytes, '\0');
  }
  for (std::size_t i = first; i < first + count; ++i) put_le(out, tokens[i], o.token_bytes);
  return out;
}

void run_tokenize(const tokenize_options& o) {
  const auto started = std::chrono::steady_clock::now();
  // Everything checked before any text is encoded.
  if (o.format == "llmc" && o.token_bytes != 2)
    throw std::invalid_argument("--token-bytes " + std::to_string(o.token_bytes) +
                                " with --format llmc: llm.c's token file (version 1) holds uint16 tokens; use --format raw");
  const bool split = o.validation_fraction > 0.0;
  if (split != !o.validation_output.empty())
    throw std::invalid_argument("--validation-fraction and --validation-output go together");
  check_output_path("--output", o.output);
  check_output_path("--validation-output", o.validation_output);
  check_output_path("--tokenizer-output", o.tokenizer_output);
  const std::vector<fs::path> files = input_files(o.input);
  const bpe_tokenizer bpe = bpe_tokenizer::from_files(o.vocab, o.merges);
  std::vector<std::string> vocabulary;
  if (!o.tokenizer_output.empty()) {
    for (std::uint32_t id = 0; id < bpe.vocab_size(); ++id) {
      if (!bpe.has_id(id))
        throw std::invalid_argument("--tokenizer-output: the vocabulary " + o.vocab + " has no token of id " +
                                    std::to_string(id) + ", and llm.c's tokenizer file holds every id below " +
                                    std::to_string(bpe.vocab_size()));
      vocabulary.push_back(bpe.token_bytes(id));
    }
  }
  const std::optional<std::uint32_t> end_of_text = bpe.find_token("<|endoftext|>");
  const std::uint64_t largest = o.token_bytes == 2 ? 0xFFFF : 0xFFFFFFFF;

  // <|endoftext|>, where the vocabulary has it, precedes every file (as llm.c does), marking document bounds.
  std::vector<std::uint32_t> tokens;
  std::uint64_t bytes = 0;
  for (const fs::path& file : files) {
    const std::string text = read_text(file);
    bytes += text.size();
    if (end_of_text) tokens.push_back(*end_of_text);
    const std::size_t first = tokens.size();
    const std::vector<std::uint32_t> ids = bpe.encode(text);
    tokens.insert(tokens.end(), ids.begin(), ids.end());
    for (std::size_t i = first; i < tokens.size(); ++i)
      if (tokens[i] > largest)
        throw std::invalid_argument("token id " + std::to_string(tokens[i]) + " (token " + std::to_string(i - first) +
                                    " of " + file.string() + ") does not fit --token-bytes " +
                                    std::to_string(o.token_bytes) + " (largest " + std::to_string(largest) +
                                    "): use --token-bytes 4 --format raw");
    if (end_of_text && *end_of_text > largest)
      throw std::invalid_argument("token id " + std::to_string(*end_of_text) + " (<|endoftext|>) does not fit --token-bytes " +
                                  std::to_string(o.token_bytes) + ": use --token-bytes 4 --format raw");
  }
  std::size_t validation = 0;
  if (split) {
    validation = static_cast<std::size_t>(std::llround(o.validation_fraction * double(tokens.size())));
    if (validation == 0 || validation == tokens.size())
      throw std::invalid_argument("--validation-fraction " + std::to_string(o.validation_fraction) + " of " +
                                  std::to_string(tokens.size()) + " tokens leaves " +
                                  (validation == 0 ? "no validation tokens" : "no training tokens"));
  }
  const std::size_t train = tokens.size() - validation;
  if (o.format == "llmc" && std::max(train, validation) > std::size_t(0x7FFFFFFF))
    throw std::invalid_argument(std::to_string(std::max(train, validation)) +
                                " tokens: llm.c's header counts at most 2^31 - 1; use --format raw");
  write_whole(o.output, token_file_bytes(tokens, 0, train, o));
  if (split) write_whole(o.validation_output, token_file_bytes(tokens, train, validation, o));
  if (!o.tokenizer_output.empty()) {
    const std::string temporary = o.tokenizer_output + ".partial." + std::to_string(::getpid());
    write_llmc_tokenizer(temporary, vocabulary, end_of_text);
    fs::rename(temporary, o.tokenizer_output);
  }
  nlohmann::json result = {{"tokens", tokens.size()}, {"files", files.size()}, {"bytes", bytes}};
  if (split) result["validation_tokens"] = validation;
  result["seconds"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  std::cout << result.dump() << std::endl;
}

}  // namespace

void add_tokenize_command(CLI::App& app) {
  auto o = std::make_shared<tokenize_options>();
  auto* cmd = app.add_subcommand("tokenize", "text to a token file with GPT-2's BPE (vocab.json, merges.txt)");
  cmd->add_option("--vocab", o->vocab, "GPT-2's vocab.json (token -> id)")->required();
  cmd->add_option("--merges", o->merges, "GPT-2's merges.txt")->required();
  cmd->add_option("--input", o->input, "a text file, or a folder of them (each a document)")->required();
  cmd->add_option("--output", o->output, "the token file to write")->required();
  cmd->add_option("--format", o->format, "llmc (llm.c's .bin: header, uint16 tokens) or raw (little-endian array)")
      ->check(CLI::IsMember({"llmc", "raw"}))
      ->capture_default_str();
  cmd->add_option("--token-bytes", o->token_bytes, "bytes per token: 2 (uint16) or 4 (uint32, --format raw)")
      ->check(CLI::IsMember({2, 4}))
      ->capture_default_str();
  cmd->add_option("--validation-fraction", o->validation_fraction,
                  "the fraction of the tokens, the last ones, written to --validation-output")
      ->check(real_number(0, false, 1));
  cmd->add_option("--validation-output", o->validation_output, "the validation token file");
  cmd->add_option("--tokenizer-output", o->tokenizer_output,
                  "also write llm.c's tokenizer file of the vocabulary (for `generate --tokenizer`)");
  cmd->callback([o] { run_tokenize(*o); });
}

}  // namespace ap::cli

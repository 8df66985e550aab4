#include "data/open_data.hpp"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "data/csv.hpp"
#include "data/fashion_mnist.hpp"
#include "data/npy.hpp"
#include "data/text_corpus.hpp"
#include "data/token_file.hpp"
#include "data/token_windows.hpp"

namespace ap {

namespace fs = std::filesystem;

namespace {

const char* formats_list = "idx (a folder with train-images-idx3-ubyte.gz), npy (.npy), csv (.csv), llmc (llm.c's "
                           ".bin, by its magic 20240520), tokens (raw .bin .u16 .u32 .tok .tokens), text (a folder, "
                           ".txt .text .md or no extension)";

std::string extension(const std::string& path) {
  std::string e = fs::path(path).extension().string();
  std::transform(e.begin(), e.end(), e.begin(), [](unsigned char ch) { return char(std::tolower(ch)); });
  return e;
}

bool starts_with_npy_magic(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char head[6] = {};
  return in.read(head, 6) && std::string(head, 6) == "\x93NUMPY";
}

bool is_token_format(const std::string& f) { return f == "tokens" || f == "llmc" || f == "text"; }

// A text corpus's bytes in file order (its parts interleave by blocks: Note [validation split]).
std::vector<std::uint8_t> all_bytes(const text_corpus& c) {
  std::vector<std::uint8_t> all;
  all.reserve(c.train.size() + c.validation.size());
  std::size_t t = 0, v = 0;
  for (std::size_t block = 0; t < c.train.size() || v < c.validation.size(); ++block) {
    const auto& part = block % 10 == 9 ? c.validation : c.train;
    std::size_t& at = block % 10 == 9 ? v : t;
    const std::size_t n = std::min(text_block_bytes, part.size() - at);
    all.insert(all.end(), part.begin() + std::ptrdiff_t(at), part.begin() + std::ptrdiff_t(at + n));
    at += n;
  }
  return all;
}

token_span owned_bytes(std::vector<std::uint8_t> bytes) {
  auto owner = std::make_shared<std::vector<std::uint8_t>>(std::move(bytes));
  return token_span{owner->data(), owner->size(), 1, owner};
}

token_span open_tokens(const std::string& path, const std::string& format, int token_bytes, std::size_t vocab) {
  const std::string e = extension(path);
  if (e == ".u16") token_bytes = 2;
  if (e == ".u32") token_bytes = 4;
  const bool llmc = format == "llmc" || (format.empty() && has_llmc_magic(path));
  return open_token_file(path, llmc ? token_file_kind::llmc : token_file_kind::raw, token_bytes, vocab);
}

std::size_t train_windows(std::size_t tokens, std::size_t context) { return std::max<std::size_t>(1, tokens / context); }

data_sets language_model_data(const data_config& c, const std::string& format, std::size_t context,
                              std::size_t classes, std::uint64_t seed, std::size_t validation_windows) {
  data_sets sets;
  if (format == "text") {
    const text_corpus corpus = load_text_corpus(c.path);
    if (classes != 0 && classes < 256)
      throw std::invalid_argument("text " + c.path + " is read as bytes (256 token ids), the model's vocabulary is " +
                                  std::to_string(classes));
    if (c.validation.empty()) check_corpus_fills(corpus, context);
    const token_span train = owned_bytes(corpus.train);
    sets.train = token_windows(train, context, train_windows(train.count, context), seed, 256, c.path + " (training)");
    const token_span validation =
        owned_bytes(c.validation.empty() ? corpus.validation : all_bytes(load_text_corpus(c.validation)));
    const std::string name = c.validation.empty() ? c.path + " (validation)" : c.validation;
    sets.validation = token_windows_in_order(validation, context, validation_windows, 256, name);
    return sets;
  }
  const std::size_t vocab = c.vocab_size != 0 ? c.vocab_size : classes;
  if (vocab == 0)
    throw std::invalid_argument("token file " + c.path + ": the vocabulary size is unknown (set vocab_size, or give "
                                "the model's output width) and token ids are checked against it");
  if (c.vocab_size != 0 && classes != 0 && c.vocab_size > classes)
    throw std::invalid_argument("token file " + c.path + ": vocab_size " + std::to_string(c.vocab_size) +
                                " exceeds the model's vocabulary " + std::to_string(classes));
  token_span all = open_tokens(c.path, format, c.token_bytes, vocab);
  token_span train = all, validation;
  std::string validation_name = c.validation;
  if (!c.validation.empty()) {
    validation = open_tokens(c.validation, format, c.token_bytes, vocab);
  } else {
    if (!(c.validation_fraction >= 0.0 && c.validation_fraction < 1.0))
      throw std::invalid_argument("validation_fraction must be in [0, 1), got " + std::to_string(c.validation_fraction));
    const std::size_t held = static_cast<std::size_t>(double(all.count) * c.validation_fraction);
    train = all.part(0, all.count - held);
    validation = all.part(all.count - held, all.count);
    validation_name = c.path + " (the last " + std::to_string(held) + " tokens)";
  }
  sets.train = token_windows(train, context, train_windows(train.count, context), seed, vocab, c.path);
  if (validation.count > 0)
    sets.validation = token_windows_in_order(validation, context, validation_windows, vocab, validation_name);
  return sets;
}

data_sets classification_data(const data_config& c, const std::string& format, std::size_t classes) {
  data_sets sets;
  if (format == "npy") {
    if (c.labels.empty())
      throw std::invalid_argument("npy features " + c.path + " need a labels file (.npy of shape (samples,))");
    sets.train = npy_source(c.path, c.labels, classes);
    if (!c.validation.empty()) {
      if (c.validation_labels.empty())
        throw std::invalid_argument("npy validation features " + c.validation + " need a validation labels file");
      sets.validation = npy_source(c.validation, c.validation_labels, classes ? classes : sets.train->num_classes());
    }
  } else if (format == "csv") {
    sets.train = csv_source(c.path, c.label_column, classes);
    if (!c.validation.empty())
      sets.validation = csv_source(c.validation, c.label_column, classes ? classes : sets.train->num_classes());
  } else {  // idx
    if (classes != 0 && classes < 10)
      throw std::invalid_argument("IDX folder " + c.path + " holds Fashion-MNIST's 10 classes, the model has " +
                                  std::to_string(classes) + " outputs");
    sets.train = memory_source(load_fashion_mnist("train", c.path));
    const std::string test_dir = c.validation.empty() ? c.path : c.validation;
    if (!c.validation.empty() || fs::exists(fs::path(test_dir) / "t10k-images-idx3-ubyte.gz"))
      sets.validation = memory_source(load_fashion_mnist("test", test_dir));
  }
  return sets;
}

}  // namespace

std::string data_format_of(const data_config& c) {
  static const char* known[] = {"idx", "npy", "csv", "tokens", "llmc", "text"};
  if (!c.format.empty()) {
    for (const char* f : known)
      if (c.format == f) return c.format;
    throw std::invalid_argument("unknown data format '" + c.format + "' for " + c.path + ": the formats are " +
                                formats_list);
  }
  std::error_code error;
  const fs::file_status status = fs::status(c.path, error);
  if (c.path.empty() || error || !fs::exists(status))
    throw std::runtime_error("data " + c.path + ": no such file or folder");
  if (fs::is_directory(status))
    return fs::exists(fs::path(c.path) / "train-images-idx3-ubyte.gz") ? "idx" : "text";
  if (starts_with_npy_magic(c.path)) return "npy";
  if (has_llmc_magic(c.path)) return "llmc";
  const std::string e = extension(c.path);
  if (e == ".npy") return "npy";
  if (e == ".csv") return "csv";
  if (e == ".bin" || e == ".u16" || e == ".u32" || e == ".tok" || e == ".tokens") return "tokens";
  if (e == ".txt" || e == ".text" || e == ".md" || e.empty()) return "text";
  throw std::runtime_error("data file " + c.path + ": unknown format (extension '" + e +
                           "', no known magic): the formats are " + formats_list);
}

data_sets open_data(const data_config& c, std::size_t context, std::size_t classes, std::uint64_t seed,
                    std::size_t validation_windows) {
  const std::string format = data_format_of(c);
  data_sets sets;
  if (context > 0) {
    if (!is_token_format(format))
      throw std::invalid_argument("data " + c.path + " is " + format + ", a classification format: a language model " +
                                  "(context " + std::to_string(context) + ") reads token files or text");
    sets = language_model_data(c, format, context, classes, seed, validation_windows);
  } else {
    if (is_token_format(format))
      throw std::invalid_argument("data " + c.path + " is " + format + ", a language model's format: a classifier " +
                                  "reads IDX, npy or CSV (a language model needs the spec's key 'context')");
    sets = classification_data(c, format, classes);
  }
  sets.train = first_samples(sets.train, c.limit);
  return sets;
}

}  // namespace ap

// A user's data by path, the reader chosen by format, magic or extension (Note [data format choice]).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "data/data_source.hpp"

namespace ap {

struct data_config {
  std::string path;  // file or folder, of any format of Note [data format choice]
  std::string labels;
  std::string validation;  // the validation file/folder of the same kind
  std::string validation_labels;
  std::string label_column = "label";
  std::string format;  // "": by magic/extension; else idx, npy, csv, tokens, llmc, text
  int token_bytes = 2;
  std::size_t vocab_size = 0;    // token files: ids must be below it (0: the model's)
  double validation_fraction = 0.1;  // token files without a validation file: the held-out fraction
  std::size_t limit = 0;  // the first N training samples only (0: all)
};

struct data_sets { std::shared_ptr<const data_source> train, validation; };

// Note [data format choice]: an explicit `format` wins. Otherwise a folder holding train-images-idx3-ubyte.gz
// is IDX, any other folder text; then by magic (\x93NUMPY: npy, 20240520: llmc); then by extension (.npy, .csv,
// .bin .u16 .u32 .tok .tokens: raw tokens, .txt .text .md or none: text). Anything else is refused naming the
// file and listing the formats.
std::string data_format_of(const data_config& c);

// `context` > 0: a language model's windows (token files, text); 0: classification (IDX, npy, CSV).
// `classes`: the model's output width, checked against labels (0: not checked). Throws std::runtime_error
// naming the file and place for bad data, std::invalid_argument for settings that do not fit. The validation
// source is null when there is none.
data_sets open_data(const data_config& c, std::size_t context, std::size_t classes, std::uint64_t seed,
                    std::size_t validation_windows);

}  // namespace ap

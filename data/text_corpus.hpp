// Text as byte tokens for a language model: a file or a folder of plain text (by default the fortunes of
// Debian's `fortunes` package), split deterministically into training and validation bytes, cut into windows
// of context + 1 bytes (inputs are a window's first context bytes, labels its last context: the next byte at
// every position).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/dataset.hpp"

namespace ap {

inline const char* default_text_path = "/usr/share/games/fortunes";

struct text_corpus {
  std::string source;                // the path given
  std::size_t files = 0;             // files read
  std::vector<std::uint8_t> train;       // about 9 bytes in 10
  std::vector<std::uint8_t> validation;  // the rest
};

// Note [validation split]: the corpus is cut into blocks of `text_block_bytes`; every tenth block (the 10th,
// 20th, ...) is validation. Blocks rather than the file's tail, because a folder's files differ in topic
// (fortunes: art, computers, ... zippy) and a tail would validate on one topic only.
inline constexpr std::size_t text_block_bytes = 4096;

// Reads `path`: a file, or every regular file of a folder in name order (not recursive), skipping fortune's
// `.dat` index files and `.u8` links; then splits it (Note [validation split]). Throws std::runtime_error
// naming the path for a missing path, an unreadable file, or no bytes at all.
text_corpus load_text_corpus(const std::string& path);

// Throws std::invalid_argument when the training or validation bytes cannot fill one window of context + 1
// bytes, naming the corpus, the part, its size, and the model spec's key 'context'.
void check_corpus_fills(const text_corpus& corpus, std::size_t context);

// `count` windows at seeded offsets of `bytes` (token_windows of the bytes, See Note [window starts]): inputs and labels
// (count, context), byte values as floats. num_classes 256.
dataset text_windows(const std::vector<std::uint8_t>& bytes, std::size_t context, std::size_t count,
                     std::uint64_t seed, const std::string& name);

// Up to `max_count` windows at a stride of `context` from the start: the validation set, with no seed.
dataset text_windows_in_order(const std::vector<std::uint8_t>& bytes, std::size_t context, std::size_t max_count,
                              const std::string& name);

}  // namespace ap

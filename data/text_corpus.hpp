// Text as byte tokens for a language model: a file or a folder of plain text (by default Debian's fortunes),
// split into training and validation bytes and cut into windows of context + 1 bytes (labels: the next byte).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/dataset.hpp"

namespace ap {

inline const char* default_text_path = "/usr/share/games/fortunes";

struct text_corpus {
  std::string source;
  std::size_t files = 0;
  std::vector<std::uint8_t> train;
  std::vector<std::uint8_t> validation;
};

// Note [validation split]: the corpus is cut into blocks of `text_block_bytes` and every tenth block is
// validation, rather than the tail, because a folder's files differ in topic and a tail would validate on one.
inline constexpr std::size_t text_block_bytes = 4096;

// Reads a file, or every regular file of a folder in name order (skipping fortune's .dat and .u8 files), and
// splits it (Note [validation split]). Throws std::runtime_error naming the path when nothing can be read.
text_corpus load_text_corpus(const std::string& path);

// Throws std::invalid_argument, naming the part and the spec key 'context', when either part cannot fill one
// window of context + 1 bytes.
void check_corpus_fills(const text_corpus& corpus, std::size_t context);

// `count` windows at seeded offsets (Note [window starts]): inputs and labels (count, context); num_classes 256.
dataset text_windows(const std::vector<std::uint8_t>& bytes, std::size_t context, std::size_t count,
                     std::uint64_t seed, const std::string& name);

// Up to `max_count` windows at a stride of `context`: the validation set, unseeded.
dataset text_windows_in_order(const std::vector<std::uint8_t>& bytes, std::size_t context, std::size_t max_count,
                              const std::string& name);

}  // namespace ap

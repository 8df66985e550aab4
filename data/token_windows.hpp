// Windows of a language model's tokens as a data source: inputs a window's first `context` tokens, labels its last.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "data/data_source.hpp"

namespace ap {

// Tokens in memory (a vector or a file's mapping): `count` little-endian ids of `bytes` (1, 2 or 4) bytes
// each, valid while `owner` lives.
struct token_span {
  const void* data = nullptr;
  std::size_t count = 0;
  int bytes = 1;
  std::shared_ptr<const void> owner;  // may be null when the caller keeps the memory alive
  bool mapped = false;  // a file's read-only mapping (Note [released windows])
  std::size_t at(std::size_t i) const {
    switch (bytes) {
      case 1: return static_cast<const std::uint8_t*>(data)[i];
      case 2: return static_cast<const std::uint16_t*>(data)[i];
      default: return static_cast<const std::uint32_t*>(data)[i];
    }
  }
  token_span part(std::size_t begin, std::size_t end) const;
};

// Note [window starts]: sample i of a seeded window source starts at
//   (hash_counters(mix_seed(seed, 0x7e47), i) * (n - context)) >> 64   (128-bit product)
// for a span of n tokens: a function of (seed, i, n) alone, so no vector of starts is held and any span of the
// same tokens (text bytes, uint16 or uint32 file) gives the same windows.
std::size_t window_start(std::uint64_t seed, std::size_t i, std::size_t tokens, std::size_t context);

// Note [released windows]: reading a window through a file's mapping leaves its pages (whole folios, up to
// 2 MiB) resident, so random windows of a large file grow resident memory without bound. After copying a
// batch, a mapped span's source drops the 2 MiB-aligned blocks it read (MADV_DONTNEED: the pages stay in the
// page cache), so resident memory stays that of a batch.
inline constexpr std::size_t released_block_bytes = std::size_t{2} << 20;

// `count` windows of context + 1 tokens at seeded starts (Note [window starts]); num_classes `vocab`.
// Throws std::invalid_argument naming `name` when the span cannot fill one window.
std::shared_ptr<const data_source> token_windows(token_span tokens, std::size_t context, std::size_t count,
                                                 std::uint64_t seed, std::size_t vocab, std::string name);

// Up to `max_count` windows at starts 0, context, 2*context, ...: unseeded validation.
std::shared_ptr<const data_source> token_windows_in_order(token_span tokens, std::size_t context,
                                                          std::size_t max_count, std::size_t vocab, std::string name);

}  // namespace ap

// Token files, memory-mapped read-only: raw little-endian uint16/uint32 arrays and llm.c's .bin.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "data/token_windows.hpp"

namespace ap {

// llm.c's token file: a header of 256 little-endian int32 (magic, version 1: uint16 tokens, token count,
// the rest 0), then the tokens.
inline constexpr std::int32_t llmc_magic = 20240520;
inline constexpr std::size_t llmc_header_bytes = 256 * 4;

enum class token_file_kind { raw, llmc };

// Maps `path` and checks it: a raw file's length is a multiple of `token_bytes` (2 or 4), an llm.c header
// and token count match the length; with `vocab_size` > 0 every id is below it (read with pread, so no page
// stays resident). Throws std::runtime_error naming the file and the offset or token; std::invalid_argument
// for a bad token_bytes. The span's owner holds the mapping.
token_span open_token_file(const std::string& path, token_file_kind kind, int token_bytes = 2,
                           std::size_t vocab_size = 0);

// Whether `path` starts with llm.c's magic.
bool has_llmc_magic(const std::string& path);

}  // namespace ap

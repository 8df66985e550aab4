// CRC32C (Castagnoli), the checksum that catches silent corruption of checkpoints and of bytes on plain TCP.
//
// Note [checksums]: checkpoint tensors (Note [checkpoint checksums]), plain-TCP link records (Note [checked
// records]) and tensors in plain-TCP messages carry a CRC32C; TLS records carry a MAC (Note [sealed records]).
// TCP's 16-bit checksum misses about one bad segment in 65,536. Hand-written (zlib has only crc32) to use
// SSE4.2's instruction, in three interleaved streams joined by linearity: crc(A B) = shift(crc(A), |B|) ^
// crc0(B); elsewhere a table.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#if defined(__x86_64__) || defined(__i386__)
#include <nmmintrin.h>
#define AP_CRC32C_X86 1
#endif

namespace ap {
namespace crc32c_detail {

constexpr std::uint32_t polynomial = 0x82f63b78;  // Castagnoli's, reflected

struct byte_table {
  std::uint32_t entry[256];
  constexpr byte_table() : entry{} {
    for (std::uint32_t b = 0; b < 256; ++b) {
      std::uint32_t c = b;
      for (int bit = 0; bit < 8; ++bit) c = (c >> 1) ^ ((c & 1u) ? polynomial : 0u);
      entry[b] = c;
    }
  }
};
inline constexpr byte_table table{};

// The register's update over `n` bytes (no inversion before or after).
inline std::uint32_t update_portable(std::uint32_t c, const unsigned char* p, std::size_t n) {
  while (n--) c = table.entry[(c ^ *p++) & 0xffu] ^ (c >> 8);
  return c;
}

#ifdef AP_CRC32C_X86
__attribute__((target("sse4.2"))) inline std::uint32_t update_one_stream(std::uint32_t c, const unsigned char* p,
                                                                         std::size_t n) {
  std::uint64_t c64 = c;
  for (; n >= 8; p += 8, n -= 8) {
    std::uint64_t word;
    std::memcpy(&word, p, 8);
    c64 = _mm_crc32_u64(c64, word);
  }
  c = static_cast<std::uint32_t>(c64);
  for (; n > 0; --n) c = _mm_crc32_u8(c, *p++);
  return c;
}

// shift(c) = the register after `zeros` zero bytes from c: linear in c, so four 256-entry tables give it.
struct zeros_shift {
  std::uint32_t part[4][256];
  explicit zeros_shift(std::size_t zeros) {
    static const unsigned char none[4096] = {};
    std::uint32_t basis[32];
    for (int i = 0; i < 32; ++i) {
      std::uint32_t c = 1u << i;
      for (std::size_t left = zeros; left > 0;) {
        const std::size_t n = left < sizeof none ? left : sizeof none;
        c = update_one_stream(c, none, n);
        left -= n;
      }
      basis[i] = c;
    }
    for (int k = 0; k < 4; ++k)
      for (std::uint32_t b = 0; b < 256; ++b) {
        std::uint32_t c = 0;
        for (int bit = 0; bit < 8; ++bit)
          if ((b >> bit) & 1u) c ^= basis[8 * k + bit];
        part[k][b] = c;
      }
  }
  std::uint32_t operator()(std::uint32_t c) const {
    return part[0][c & 0xffu] ^ part[1][(c >> 8) & 0xffu] ^ part[2][(c >> 16) & 0xffu] ^ part[3][c >> 24];
  }
};

// Rounds of three blocks of `block` bytes computed side by side while n allows; returns the register and moves p, n.
__attribute__((target("sse4.2"))) inline std::uint32_t three_streams(std::uint32_t c, const unsigned char*& p,
                                                                     std::size_t& n, std::size_t block,
                                                                     const zeros_shift& shift) {
  while (n >= 3 * block) {
    std::uint64_t a = c, b = 0, d = 0;
    const unsigned char* q = p;
    for (std::size_t i = 0; i < block; i += 8) {
      std::uint64_t wa, wb, wd;
      std::memcpy(&wa, q + i, 8);
      std::memcpy(&wb, q + block + i, 8);
      std::memcpy(&wd, q + 2 * block + i, 8);
      a = _mm_crc32_u64(a, wa);
      b = _mm_crc32_u64(b, wb);
      d = _mm_crc32_u64(d, wd);
    }
    c = shift(shift(static_cast<std::uint32_t>(a)) ^ static_cast<std::uint32_t>(b)) ^ static_cast<std::uint32_t>(d);
    p += 3 * block;
    n -= 3 * block;
  }
  return c;
}

inline std::uint32_t update_hardware(std::uint32_t c, const unsigned char* p, std::size_t n) {
  constexpr std::size_t long_block = 8192, short_block = 256;
  static const zeros_shift long_shift(long_block), short_shift(short_block);
  c = three_streams(c, p, n, long_block, long_shift);
  c = three_streams(c, p, n, short_block, short_shift);
  return update_one_stream(c, p, n);
}

inline bool has_sse42() {
  static const bool yes = __builtin_cpu_supports("sse4.2");
  return yes;
}
#endif

}  // namespace crc32c_detail

// The CRC32C of `size` bytes at `data`, continuing from `crc`, the CRC32C of the bytes before them (0 for none):
// crc32c(B, crc32c(A)) == crc32c(A B). crc32c("123456789", 9) == 0xe3069283.
inline std::uint32_t crc32c(const void* data, std::size_t size, std::uint32_t crc = 0) {
  const auto* p = static_cast<const unsigned char*>(data);
  std::uint32_t c = ~crc;
#ifdef AP_CRC32C_X86
  if (crc32c_detail::has_sse42()) return ~crc32c_detail::update_hardware(c, p, size);
#endif
  return ~crc32c_detail::update_portable(c, p, size);
}

}  // namespace ap

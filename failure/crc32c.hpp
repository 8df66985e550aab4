// CRC32C (Castagnoli), the checksum that catches silent corruption of checkpoints and of bytes on plain TCP.
//
// Note [checksums]: checkpoint tensors (Note [checkpoint checksums]), plain-TCP link records (Note [checked
// records]) and tensors in plain-TCP messages carry a CRC32C; TLS records carry a MAC (Note [sealed records]).
// TCP's 16-bit checksum misses about one bad segment in 65,536. Computed by ISA-L (Intel's storage library,
// Debian's libisal-dev), which picks its fastest form for the processor at run time (zlib has only crc32).
#pragma once

#include <algorithm>
#include <climits>
#include <cstddef>
#include <cstdint>

#include <isa-l/crc.h>

namespace ap {

// The CRC32C of `size` bytes at `data`, continuing from `crc`, the CRC32C of the bytes before them (0 for none):
// crc32c(B, crc32c(A)) == crc32c(A B). crc32c("123456789", 9) == 0xe3069283.
inline std::uint32_t crc32c(const void* data, std::size_t size, std::uint32_t crc = 0) {
  // ISA-L's crc32_iscsi takes an int length and works on the register without the final inversion.
  auto* p = static_cast<unsigned char*>(const_cast<void*>(data));
  std::uint32_t c = ~crc;
  for (std::size_t left = size; left > 0;) {
    const std::size_t n = std::min<std::size_t>(left, INT_MAX);
    c = crc32_iscsi(p, static_cast<int>(n), c);
    p += n;
    left -= n;
  }
  return ~c;
}

}  // namespace ap

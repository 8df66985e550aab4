// bfloat16: the upper 16 bits of an IEEE float32 (8 exponent bits, 7 mantissa bits), as oneDNN, PyTorch and
// safetensors' BF16 define it. Conversions round to nearest even; NaN stays NaN.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace ap {

struct bfloat16 {
  std::uint16_t bits = 0;
};

inline bfloat16 to_bfloat16(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return bfloat16{static_cast<std::uint16_t>((u >> 16) | 0x40u)};  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest, ties to even
  return bfloat16{static_cast<std::uint16_t>(u >> 16)};
}

inline float to_float(bfloat16 x) {
  const std::uint32_t u = static_cast<std::uint32_t>(x.bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// Whole buffers, bit for bit the scalar functions above.
// Note [conversions]: plain loops over the scalar functions, which GCC vectorises. oneDNN's reorder, no faster,
// flushes subnormal inputs to zero, so it is not the same conversion.
void to_bfloat16(const float* in, bfloat16* out, std::size_t n);
void to_float(const bfloat16* in, float* out, std::size_t n);
// Every element replaced by the nearest bfloat16 value, kept in float32, bit for bit: what crosses a layer
// boundary in bfloat16 training (Note [compute dtype]).
void round_to_bfloat16(float* x, std::size_t n);
// The same from `in` into `out` (n elements each).
void round_to_bfloat16(const float* in, float* out, std::size_t n);

}  // namespace ap

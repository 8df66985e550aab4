// e^x for x <= 0 in float32 on vector lanes (Note [fast exp]), and a row's maximum, a softmax's shift.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

namespace ap {

// Note [fast exp]: glibc's expf is a scalar call. Cephes' expf: e^x = 2^z e^r, z the integer nearest x / ln 2 (by
// adding and subtracting 1.5 * 2^23: GCC does not vectorise std::floor), e^r a degree-7 polynomial on
// |r| <= ln 2 / 2; relative error below 1e-7. x below -87 is taken as -87 (0 in every sum).

// Note [trapping math]: the project compiles with -fno-trapping-math (CMakeLists.txt): without it GCC 12 keeps a
// float comparison (the std::max below) as a branch on AVX2, leaving every loop calling this scalar. No trap is
// ever enabled, and the flag changes no value.

// Note [vector width]: GCC 12 prefers 256-bit vectors on AVX-512 cores; the project compiles with
// -mprefer-vector-width=512 (CMakeLists.txt), which speeds up compute-bound element loops such as GELU's. Only
// sums' order within a row changes (Note [vector sums]): the same bits on any thread count.
inline float exp_nonpositive(float x) {
  x = std::max(x, -87.0f);
  const float z = (x * 1.44269504f + 12582912.0f) - 12582912.0f;  // nearest integer to x / ln 2 (1.5 * 2^23)
  const float r = x - z * 0.693359375f + z * 2.12194440e-4f;  // x - z ln 2 in two parts: |r| <= ln 2 / 2
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  // 2^z: z + 127 + 2^23 holds z + 127 in its low mantissa bits, which the shift moves into the exponent. Without a
  // float-to-int conversion, a NaN gives a NaN result, not undefined behaviour.
  float biased = z + 8388735.0f;
  std::uint32_t bits;
  std::memcpy(&bits, &biased, sizeof bits);
  bits <<= 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

// The largest of x[0 .. n), n >= 1, on vector lanes: a maximum is exact in any order, so the bits are those of
// the serial loop.
inline float row_max(const float* x, std::size_t n) {
  float max = x[0];
#pragma omp simd reduction(max : max)
  for (std::size_t i = 1; i < n; ++i) max = std::max(max, x[i]);
  return max;
}

}  // namespace ap

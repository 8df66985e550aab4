// e^x for x <= 0 in float32, as a loop body the compiler vectorises (Note [fast exp]), and a row's maximum, the
// shift that keeps a softmax's exps there.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

namespace ap {

// Note [fast exp]: glibc's expf and exp are scalar calls: 3% of a training step in the attention's softmax,
// and most of the cross-entropy's time (8,192 x 256 exps in double took 22 ms for the loss and 29 ms for the
// gradient on one core of the 16-core machine, on the coordinator's one thread). Cephes' expf: e^x = 2^z e^r
// with z the integer nearest x / ln 2 and e^r by a degree-7 polynomial on |r| <= ln 2 / 2. Relative error
// below 1e-7 (about 1 ulp, measured against exp on [-80, 0]); x below -87 is taken as -87 (e^-87 ~ 1.6e-38: a
// probability that is 0 in every sum). Softmaxes call it on x - max(x), which is never positive.
// The nearest integer is taken by adding and subtracting 1.5 * 2^23, not by std::floor(v + 0.5): GCC 12 does
// not vectorise floor without -fno-trapping-math, and one floor left the whole loop scalar, 2.1 ns an exp on
// one core of this machine; with the addition the loop runs on vector lanes, 0.23 ns (and the causal softmax of
// 512 x 128 x 128 scores went from 12.7 to 5.3 ms). At an exact tie the two round differently, and both give
// |r| <= ln 2 / 2.

// Note [trapping math]: the project compiles with -fno-trapping-math (CMakeLists.txt). Without it GCC 12 keeps a
// comparison that may raise a floating-point exception (the std::max below; any select on a float compare) as a
// branch unless AVX-512's masked lanes can hold it, so on an AVX2 processor every loop calling this one ran one
// element at a time: perf showed the causal softmax's exp loop in scalar instructions only (vmulss, vmovss)
// on a 2-vCPU AMD EPYC. We never enable floating-point traps, and the flag changes no value (it permits no
// reassociation; that is -fassociative-math). Measured there (bench_ops, one thread, the binaries alternating
// twice): causal softmax 25.4 / 25.2 -> 10.7 / 9.4 ms, cross-entropy on the GPT's logits 11.0-13.7 -> 3.3-5.3 ms
// (loss) and 15.7 -> 3.9-6.1 ms (gradient), the attention's heads forward 52-58 -> 41-43 ms.

// Note [vector width]: GCC 12 tunes for Intel's AVX-512 cores with -mprefer-vector-width=256 (`gcc -march=native -Q
// --help=target` on a 2-vCPU Sapphire Rapids VM, which GCC takes for Rocket Lake), so it vectorises loops on 8 lanes
// of ymm registers, not 16 of zmm; perf showed GELU's backward in ymm only there, and 2 threads ran it at 0.72-0.80
// of twice one thread's speed. The project compiles with -mprefer-vector-width=512 (CMakeLists.txt; where the
// compiler takes it, and it changes nothing on a processor without AVX-512). There (bench_ops, the two builds one
// after the other, ms at 1 / 2 threads): GELU backward 16.4 / 10.3 -> 9.4 / 4.8, forward 11.0 / 3.95 -> 8.7 / 3.3,
// the attention heads' backward 31.4 -> 28.5 on one thread; the memory-bound ops unchanged. The 4-layer GPT
// (`bench_ops gpt`, batch 64, alternating twice) 5,304 / 5,363 -> 5,477 / 5,700 tokens/s on one thread, 10,443 / 10,673 ->
// 10,969 / 10,778 on two. Only sums' order within a row changes (Note [vector sums]): the same bits on any thread
// count, as before.
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
  // 2^z: z + 127 + 2^23 holds the integer z + 127 in its low mantissa bits, which the shift moves into the
  // exponent. Unsigned and without a float-to-int conversion, so a NaN gives a scale of 0 and a NaN result
  // (p is NaN), not undefined behaviour.
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

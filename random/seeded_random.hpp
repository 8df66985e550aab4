// Seeded random numbers from plain 64-bit integer arithmetic: a seed gives the same numbers with every compiler
// and standard library (unlike std::*_distribution). The project's one generator.
#pragma once

#include <cmath>
#include <cstdint>

namespace ap {

// splitmix64's finaliser: a bijective 64-bit mix; mix64(x) is the first number of splitmix64(x).
inline std::uint64_t mix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// A hash of several counters; chaining through mix64 keeps (a, b) and (b, a) apart.
inline std::uint64_t hash_counters(std::uint64_t a, std::uint64_t b) { return mix64(mix64(a) ^ b); }
inline std::uint64_t hash_counters(std::uint64_t a, std::uint64_t b, std::uint64_t c, std::uint64_t d) {
  return hash_counters(hash_counters(hash_counters(a, b), c), d);
}

// Mixes (seed, epoch)-style pairs into one well-spread seed (the data library's streams start here).
inline std::uint64_t mix_seed(std::uint64_t a, std::uint64_t b) { return mix64(a ^ mix64(b)); }

// Uniform in [0, 1) with 24 random bits: every value is exact in float, so no rounding differs anywhere.
inline float unit_float(std::uint64_t bits) { return static_cast<float>(bits >> 40) * 0x1p-24f; }

// Uniform in [-1, 1), exactly representable (24 bits with the sign): scaling it by a bound rounds once.
inline float symmetric_unit_float(std::uint64_t bits) {
  return static_cast<float>(static_cast<std::int64_t>(bits >> 40) - (std::int64_t{1} << 23)) * 0x1p-23f;
}

// splitmix64 (Vigna's splitmix64.c) as a stream.
class splitmix64 {
 public:
  explicit splitmix64(std::uint64_t seed) : state_(seed) {}

  // Advances the state by the golden gamma and returns its mix.
  std::uint64_t next() {
    const std::uint64_t before = state_;
    state_ += 0x9e3779b97f4a7c15ull;
    return mix64(before);
  }

  // Uniform in [0, bound), unbiased (rejection below 2^64 mod bound); bound > 0.
  std::uint64_t below(std::uint64_t bound) {
    const std::uint64_t threshold = (0 - bound) % bound;  // 2^64 mod bound
    for (;;) {
      const std::uint64_t r = next();
      if (r >= threshold) return r % bound;
    }
  }

  // Uniform in [0, 1) with 53 random bits.
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

  // Standard normal by Box-Muller; exact across platforms only as far as std::log/sqrt/cos agree.
  double normal() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    const double u1 = static_cast<double>((next() >> 11) + 1) * 0x1.0p-53;  // (0, 1]
    const double u2 = uniform();
    const double radius = std::sqrt(-2.0 * std::log(u1));
    const double angle = 6.283185307179586476925 * u2;
    spare_ = radius * std::sin(angle);
    has_spare_ = true;
    return radius * std::cos(angle);
  }

 private:
  std::uint64_t state_;
  double spare_ = 0.0;
  bool has_spare_ = false;
};

}  // namespace ap

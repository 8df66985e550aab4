// Integer-only random numbers: identical on every platform and compiler for identical seeds.
#pragma once

#include <cstdint>

namespace ap {

// splitmix64's finaliser: a bijective 64-bit mix, good enough to turn counters into independent bits.
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

// Uniform in [0, 1) with 24 random bits: every value is exact in float, so no rounding differs anywhere.
inline float unit_float(std::uint64_t bits) { return static_cast<float>(bits >> 40) * 0x1p-24f; }

// Uniform in [-1, 1), exactly representable (24 bits with the sign): scaling it by a bound rounds once.
inline float symmetric_unit_float(std::uint64_t bits) {
  return static_cast<float>(static_cast<std::int64_t>(bits >> 40) - (std::int64_t{1} << 23)) * 0x1p-23f;
}

// splitmix64 as a stream, for filling a weight matrix from one seed.
class splitmix64 {
 public:
  explicit splitmix64(std::uint64_t seed) : state_(seed) {}
  std::uint64_t next() {
    state_ += 0x9e3779b97f4a7c15ull;
    std::uint64_t z = state_;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }

 private:
  std::uint64_t state_;
};

}  // namespace ap

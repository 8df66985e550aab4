// The seeded generator of the data library: splitmix64, plain 64-bit integer arithmetic, so a seed gives
// the same numbers with every compiler and standard library (unlike std::shuffle or std::*_distribution).
#pragma once

#include <cmath>
#include <cstdint>

namespace ap {

class splitmix64 {
 public:
  explicit splitmix64(std::uint64_t seed) : state_(seed) {}

  std::uint64_t next() {
    std::uint64_t z = (state_ += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
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

  // Standard normal by Box-Muller (both outputs used). Exact across platforms only as far as the
  // platform's std::log/std::sqrt/std::cos agree, which is enough for synthetic data.
  double normal() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    const double u1 = static_cast<double>((next() >> 11) + 1) * 0x1.0p-53;  // (0, 1]: log is finite
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

// One splitmix64 step as a hash: mixes (seed, epoch)-style pairs into one well-spread seed.
inline std::uint64_t mix_seed(std::uint64_t a, std::uint64_t b) {
  splitmix64 g(a ^ splitmix64(b).next());
  return g.next();
}

}  // namespace ap

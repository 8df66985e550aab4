#include "tensor/bfloat16.hpp"

#include "tensor/compute.hpp"

namespace ap {

// Note [op threads] in elementwise.hpp: each element converted alone, so any thread count gives the same bits.
void to_bfloat16(const float* in, bfloat16* out, std::size_t n) {
  const auto count = static_cast<std::ptrdiff_t>(n);
#pragma omp parallel for simd schedule(static) if (count >= parallel_elements)
  for (std::ptrdiff_t i = 0; i < count; ++i) out[i] = to_bfloat16(in[i]);
}

void to_float(const bfloat16* in, float* out, std::size_t n) {
  const auto count = static_cast<std::ptrdiff_t>(n);
#pragma omp parallel for simd schedule(static) if (count >= parallel_elements)
  for (std::ptrdiff_t i = 0; i < count; ++i) out[i] = to_float(in[i]);
}

void round_to_bfloat16(float* x, std::size_t n) {
  const auto count = static_cast<std::ptrdiff_t>(n);
#pragma omp parallel for simd schedule(static) if (count >= parallel_elements)
  for (std::ptrdiff_t i = 0; i < count; ++i) x[i] = to_float(to_bfloat16(x[i]));
}

void round_to_bfloat16(const float* in, float* out, std::size_t n) {
  const auto count = static_cast<std::ptrdiff_t>(n);
#pragma omp parallel for simd schedule(static) if (count >= parallel_elements)
  for (std::ptrdiff_t i = 0; i < count; ++i) out[i] = to_float(to_bfloat16(in[i]));
}

}  // namespace ap

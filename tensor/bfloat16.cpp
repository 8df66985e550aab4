#include "tensor/bfloat16.hpp"

namespace ap {

void to_bfloat16(const float* in, bfloat16* out, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) out[i] = to_bfloat16(in[i]);
}

void to_float(const bfloat16* in, float* out, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) out[i] = to_float(in[i]);
}

void round_to_bfloat16(float* x, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) x[i] = to_float(to_bfloat16(x[i]));
}

}  // namespace ap

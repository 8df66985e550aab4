#include "model/dropout.hpp"

#include <stdexcept>

#include "random/seeded_random.hpp"
#include "model/spec_text.hpp"

namespace ap {

dropout::dropout(float p, std::uint64_t seed) : p_(p), seed_(seed) {
  if (!(p >= 0.0f && p < 1.0f))
    throw std::invalid_argument("Dropout probability must be in [0, 1), got " + format_float(p));
}

std::string dropout::describe() const { return "Dropout(" + format_float(p_) + ")"; }

std::string dropout::spec() const { return "dropout:" + format_float(p_) + ":" + std::to_string(seed_); }

tensor dropout::forward(const tensor& x, layer_cache& cache, const forward_context& ctx) const {
  saved& s = cache.emplace<saved>();
  s.identity = !ctx.training || p_ == 0.0f;
  if (s.identity) {
    s.mask = tensor::from_shape({0});
    return x;
  }
  // One sample is everything under one index of the first axis (Note [dropout mask]).
  const std::size_t per_sample = x.dimension() <= 1 ? x.size() : x.size() / x.shape()[0];
  const float scale = 1.0f / (1.0f - p_);
  const bool bf16 = compute_dtype() == dtype::bfloat16;  // keep flags 0 or 1 (Note [compute dtype])
  if (shape_of(s.mask) != shape_of(x) || s.mask.type() != compute_dtype()) s.mask.reset(x.shape(), compute_dtype());
  tensor y = tensor::from_shape(x.shape());
  const std::uint64_t step_key = hash_counters(seed_, ctx.step);
  const float* px = x.data();
  float* pm = bf16 ? nullptr : s.mask.data();
  bfloat16* pk = bf16 ? s.mask.bf16_data() : nullptr;
  float* py = y.data();
  for (std::size_t sample = 0; per_sample != 0 && sample < x.size() / per_sample; ++sample) {
    const std::uint64_t sample_key = hash_counters(step_key, ctx.first_sample + sample);
    for (std::size_t u = 0; u < per_sample; ++u) {
      const std::size_t i = sample * per_sample + u;
      const bool keep = !(unit_float(hash_counters(sample_key, u)) < p_);
      const float m = keep ? scale : 0.0f;
      if (bf16)
        pk[i] = to_bfloat16(keep ? 1.0f : 0.0f);
      else
        pm[i] = m;
      py[i] = px[i] * m;
    }
  }
  return y;
}

void dropout::backward_input(const tensor& dy, layer_cache& cache, tensor* dx) const {
  const saved& s = cache.get<saved>(*this);
  if (!s.identity) check_dy_shape(dy, shape_of(s.mask), *this);
  if (!dx) return;
  const float* pdy = dy.data();
  if (s.identity) return accumulate_elementwise(*dx, shape_of(dy), *this, [=](std::size_t i) { return pdy[i]; });
  if (s.mask.type() == dtype::bfloat16) {
    const bfloat16* pk = s.mask.bf16_data();
    const float scale = 1.0f / (1.0f - p_);  // as in forward: the same float32 factor
    accumulate_elementwise(*dx, shape_of(dy), *this,
                           [=](std::size_t i) { return pdy[i] * (to_float(pk[i]) != 0.0f ? scale : 0.0f); });
    return;
  }
  const float* pm = s.mask.data();
  accumulate_elementwise(*dx, shape_of(dy), *this, [=](std::size_t i) { return pdy[i] * pm[i]; });
}

}  // namespace ap

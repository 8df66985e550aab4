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
  if (!ctx.training || p_ == 0.0f) {
    cache.saved.assign({tensor::from_shape({0})});
    return x;
  }
  // Note [dropout mask]: one sample is everything under one index of the first axis.
  const std::size_t per_sample = x.dimension() <= 1 ? x.size() : x.size() / x.shape()[0];
  const float scale = 1.0f / (1.0f - p_);
  tensor mask = tensor::from_shape(x.shape());
  tensor y = tensor::from_shape(x.shape());
  const std::uint64_t step_key = hash_counters(seed_, ctx.step);
  const float* px = x.data();
  float* pm = mask.data();
  float* py = y.data();
  for (std::size_t s = 0; per_sample != 0 && s < x.size() / per_sample; ++s) {
    const std::uint64_t sample_key = hash_counters(step_key, ctx.first_sample + s);
    for (std::size_t u = 0; u < per_sample; ++u) {
      const std::size_t i = s * per_sample + u;
      pm[i] = unit_float(hash_counters(sample_key, u)) < p_ ? 0.0f : scale;
      py[i] = px[i] * pm[i];
    }
  }
  cache.saved.assign({std::move(mask)});
  return y;
}

tensor dropout::backward_input(const tensor& dy, const layer_cache& cache) const {
  if (cache.saved.size() != 1)
    throw std::invalid_argument(describe() + " backward: the cache holds no forward of this layer");
  const tensor& mask = cache.saved[0];
  if (mask.size() == 0) return dy;  // the forward was the identity
  if (dy.shape() != mask.shape())
    throw std::invalid_argument(describe() + " backward: dy of shape " + shape_string(dy) +
                                " does not match the forward's " + shape_string(mask));
  tensor dx = tensor::from_shape(dy.shape());
  const float* pm = mask.data();
  const float* pdy = dy.data();
  float* pdx = dx.data();
  for (std::size_t i = 0; i < dy.size(); ++i) pdx[i] = pdy[i] * pm[i];
  return dx;
}

}  // namespace ap

#include "model/rms_norm.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <vector>

#include "tensor/compute.hpp"
#include "tensor/elementwise.hpp"

namespace ap {

rms_norm::rms_norm(std::size_t width) : width_(width), weight_(zeros({width})), dweight_(zeros({width})) {
  if (width == 0) throw std::invalid_argument("RMSNorm needs a positive width");
  initialize(0);
}

void rms_norm::initialize(std::uint64_t) { std::fill(weight_.begin(), weight_.end(), 1.0f); }

tensor rms_norm::forward(const tensor& x, layer_cache& cache, const forward_context&) const {
  if (cols(x) != width_)
    throw std::invalid_argument(describe() + " takes " + std::to_string(width_) + " features, got input of shape " +
                                shape_string(x));
  const std::size_t n = rows(x), c = width_;
  tensor y = tensor::from_shape(x.shape());
  saved& s = cache.emplace<saved>();
  stash_as(s.x, x, compute_dtype());  // the statistics below from the float32 x (Note [compute dtype])
  if (shape_of(s.rstd) != shape_t{n}) s.rstd = tensor::from_shape({n});
  const float* px = x.data();
  const float* w = weight_.data();
  float* py = y.data();
  float* rstd = s.rstd.data();
  const auto count = static_cast<std::ptrdiff_t>(n);
  // Note [op threads] in tensor/elementwise.hpp: rows are independent; each keeps the serial arithmetic.
#pragma omp parallel for schedule(static) if (std::ptrdiff_t(n * c) >= parallel_elements)
  for (std::ptrdiff_t row = 0; row < count; ++row) {
    const std::size_t r = std::size_t(row);
    const float* xr = px + r * c;
    double squares = 0.0;  // a double sum, as LayerNorm's reference statistics
    for (std::size_t i = 0; i < c; ++i) squares += double(xr[i]) * double(xr[i]);
    const float inv = float(1.0 / std::sqrt(squares / double(c) + double(eps)));
    rstd[r] = inv;
    float* yr = py + r * c;
    for (std::size_t i = 0; i < c; ++i) yr[i] = xr[i] * inv * w[i];
  }
  return y;
}

namespace {

const rms_norm::saved& checked(const rms_norm& l, const tensor& dy, layer_cache& cache) {
  const rms_norm::saved& s = cache.get<rms_norm::saved>(l);
  check_dy_shape(dy, shape_of(s.x), l);
  return s;
}

}  // namespace

void rms_norm::backward_input(const tensor& dy, layer_cache& cache, tensor* dx) const {
  const saved& s = checked(*this, dy, cache);
  if (!dx) return;
  tensor scratch;
  const tensor& x = float32_view(s.x, scratch);
  const float* rstd = s.rstd.data();
  const float* w = weight_.data();
  const std::size_t n = rows(x), c = width_;
  float* pdx = accumulate_into(*dx, shape_of(x), *this);
  const float* px = x.data();
  const float* pdy = dy.data();
  const auto count = static_cast<std::ptrdiff_t>(n);
#pragma omp parallel for schedule(static) if (std::ptrdiff_t(n * c) >= parallel_elements)
  for (std::ptrdiff_t row = 0; row < count; ++row) {
    const std::size_t r = std::size_t(row);
    const float* xr = px + r * c;
    const float* dyr = pdy + r * c;
    float* dxr = pdx + r * c;
    // dx = rstd * (dnorm - xhat * mean(dnorm * xhat)), with xhat = x * rstd and dnorm = dy * weight.
    float dnorm_xhat_mean = 0.0f;
#pragma omp simd reduction(+ : dnorm_xhat_mean)  // Note [vector sums] in tensor/compute.hpp
    for (std::size_t i = 0; i < c; ++i) dnorm_xhat_mean += dyr[i] * w[i] * xr[i] * rstd[r];
    dnorm_xhat_mean /= float(c);
    for (std::size_t i = 0; i < c; ++i) {
      const float xhat = xr[i] * rstd[r];
      dxr[i] += (dyr[i] * w[i] - xhat * dnorm_xhat_mean) * rstd[r];
    }
  }
}

void rms_norm::backward_weight(const tensor& dy, layer_cache& cache) {
  const saved& s = checked(*this, dy, cache);
  tensor scratch;
  const tensor& x = float32_view(s.x, scratch);
  const float* rstd = s.rstd.data();
  const std::size_t n = rows(x), c = width_;
  const float* px = x.data();
  const float* pdy = dy.data();
  // Note [row-block sums] in tensor/elementwise.hpp: each column's rows summed by blocks.
  float* const sums[1] = {dweight_.data()};
  add_row_block_sums(
      n, c, 1,
      [&](std::size_t r, float* partial) {
        const float* xr = px + r * c;
        const float* dyr = pdy + r * c;
        for (std::size_t i = 0; i < c; ++i) partial[i] += dyr[i] * xr[i] * rstd[r];
      },
      sums);
}

std::vector<parameter> rms_norm::parameters(const std::string& prefix) {
  return {{prefix + "weight", &weight_, &dweight_}};
}

}  // namespace ap

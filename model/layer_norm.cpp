#include "model/layer_norm.hpp"

#include <algorithm>
#include <vector>
#include <cmath>
#include <stdexcept>

#include "tensor/compute.hpp"
#include "tensor/elementwise.hpp"
#include "tensor/nn_ops.hpp"

namespace ap {

layer_norm::layer_norm(std::size_t width, bool bias)
    : width_(width), bias_(bias), gamma_(zeros({width})), beta_(zeros({width})), dgamma_(zeros({width})),
      dbeta_(zeros({width})) {
  if (width == 0) throw std::invalid_argument("LayerNorm needs a positive width");
  initialize(0);
}

void layer_norm::initialize(std::uint64_t) {
  std::fill(gamma_.begin(), gamma_.end(), 1.0f);
  std::fill(beta_.begin(), beta_.end(), 0.0f);
}

tensor layer_norm::forward(const tensor& x, layer_cache& cache, const forward_context&) const {
  if (cols(x) != width_)
    throw std::invalid_argument(describe() + " takes " + std::to_string(width_) +
                                " features, got input of shape " + shape_string(x));
  const std::size_t n = rows(x), c = width_;
  tensor y = tensor::from_shape(x.shape());
  saved& s = cache.emplace<saved>();
  stash_as(s.x, x, compute_dtype());  // statistics below from the float32 x (Note [compute dtype])
  if (shape_of(s.mean) != shape_t{n}) s.mean = tensor::from_shape({n}), s.rstd = tensor::from_shape({n});
  // tensor/nn_ops.hpp: oneDNN's layer normalisation, or the reference loop (two passes, double sums).
  layer_norm_forward(x.data(), gamma_.data(), beta_.data(), eps, n, c, y.data(), s.mean.data(), s.rstd.data());
  return y;
}

namespace {

const layer_norm::saved& checked(const layer_norm& l, const tensor& dy, layer_cache& cache) {
  const layer_norm::saved& s = cache.get<layer_norm::saved>(l);
  check_dy_shape(dy, shape_of(s.x), l);
  return s;
}

}  // namespace

void layer_norm::backward_input(const tensor& dy, layer_cache& cache, tensor* dx) const {
  const saved& s = checked(*this, dy, cache);
  if (!dx) return;
  tensor scratch;
  const tensor& x = float32_view(s.x, scratch);
  const float* mean = s.mean.data();
  const float* rstd = s.rstd.data();
  const float* g = gamma_.data();
  const std::size_t n = rows(x), c = width_;
  float* pdx = accumulate_into(*dx, shape_of(x), *this);
  const float* px = x.data();
  const float* pdy = dy.data();
  // Note [op threads] in tensor/elementwise.hpp: rows are independent; each keeps the serial arithmetic.
  const auto count = static_cast<std::ptrdiff_t>(n);
#pragma omp parallel for schedule(static) if (std::ptrdiff_t(n * c) >= parallel_elements)
  for (std::ptrdiff_t row = 0; row < count; ++row) {
    const std::size_t r = std::size_t(row);
    const float* xr = px + r * c;
    const float* dyr = pdy + r * c;
    float* dxr = pdx + r * c;
    // dx = rstd * (dnorm - mean(dnorm) - xhat * mean(dnorm * xhat)), with dnorm = dy * gamma (as llm.c).
    float dnorm_mean = 0.0f, dnorm_xhat_mean = 0.0f;
#pragma omp simd reduction(+ : dnorm_mean, dnorm_xhat_mean)  // Note [vector sums] in tensor/compute.hpp
    for (std::size_t i = 0; i < c; ++i) {
      const float xhat = (xr[i] - mean[r]) * rstd[r];
      const float dnorm = dyr[i] * g[i];
      dnorm_mean += dnorm;
      dnorm_xhat_mean += dnorm * xhat;
    }
    dnorm_mean /= float(c);
    dnorm_xhat_mean /= float(c);
    for (std::size_t i = 0; i < c; ++i) {
      const float xhat = (xr[i] - mean[r]) * rstd[r];
      dxr[i] += (dyr[i] * g[i] - dnorm_mean - xhat * dnorm_xhat_mean) * rstd[r];
    }
  }
}

void layer_norm::backward_weight(const tensor& dy, layer_cache& cache) {
  const saved& s = checked(*this, dy, cache);
  tensor scratch;
  const tensor& x = float32_view(s.x, scratch);
  const float* mean = s.mean.data();
  const float* rstd = s.rstd.data();
  float* dg = dgamma_.data();
  float* db = dbeta_.data();
  const std::size_t n = rows(x), c = width_;
  const float* px = x.data();
  const float* pdy = dy.data();
  // Note [row-block sums] in tensor/elementwise.hpp: dgamma and dbeta, each column's rows summed by blocks.
  float* const sums[2] = {dg, db};
  add_row_block_sums(
      n, c, bias_ ? 2 : 1,
      [&](std::size_t r, float* partial) {
        const float* xr = px + r * c;
        const float* dyr = pdy + r * c;
        float* pg = partial;
        for (std::size_t i = 0; i < c; ++i) pg[i] += dyr[i] * (xr[i] - mean[r]) * rstd[r];
        if (!bias_) return;
        float* pb = partial + c;
        for (std::size_t i = 0; i < c; ++i) pb[i] += dyr[i];
      },
      sums);
}

std::vector<parameter> layer_norm::parameters(const std::string& prefix) {
  if (!bias_) return {{prefix + "gamma", &gamma_, &dgamma_}};
  return {{prefix + "gamma", &gamma_, &dgamma_}, {prefix + "beta", &beta_, &dbeta_}};
}

}  // namespace ap

#include "model/token_embedding.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "model/spec_text.hpp"
#include "random/seeded_random.hpp"
#include "tensor/compute.hpp"
#include "tensor/elementwise.hpp"

namespace ap {

token_embedding::token_embedding(std::size_t vocabulary, std::size_t dim)
    : vocabulary_(vocabulary), dim_(dim), weight_(zeros({vocabulary, dim})), dweight_(zeros({vocabulary, dim})) {
  if (vocabulary == 0 || dim == 0) throw std::invalid_argument("Embedding needs positive sizes, got " + describe());
}

std::string token_embedding::describe() const {
  return "Embedding(" + std::to_string(vocabulary_) + "x" + std::to_string(dim_) + ")";
}

std::string token_embedding::spec() const {
  return "embedding:" + std::to_string(vocabulary_) + ":" + std::to_string(dim_);
}

tensor token_embedding::forward(const tensor& x, layer_cache& cache, const forward_context&) const {
  if (x.dimension() != 2)
    throw std::invalid_argument(describe() + " takes token ids of shape (batch, sequence), got " + shape_string(x));
  const float* ids = x.data();
  const std::size_t n = x.size();
  for (std::size_t i = 0; i < n; ++i)
    if (!(ids[i] >= 0.0f && ids[i] < float(vocabulary_) && ids[i] == std::floor(ids[i])))
      throw std::invalid_argument(describe() + ": the token id at (" + std::to_string(i / x.shape()[1]) + ", " +
                                  std::to_string(i % x.shape()[1]) + ") is " + format_float(ids[i]) +
                                  ", not an integer in [0, " + std::to_string(vocabulary_) + ")");
  tensor y = tensor::from_shape({x.shape()[0], x.shape()[1], dim_});  // (batch, sequence, dim)
  const float* w = weight_.data();
  float* py = y.data();
  const auto count = static_cast<std::ptrdiff_t>(n);  // Note [op threads] in tensor/elementwise.hpp
#pragma omp parallel for schedule(static) if (std::ptrdiff_t(n * dim_) >= parallel_elements)
  for (std::ptrdiff_t i = 0; i < count; ++i)
    std::memcpy(py + std::size_t(i) * dim_, w + static_cast<std::size_t>(ids[i]) * dim_, dim_ * sizeof(float));
  cache.emplace<saved>().ids = x;
  return y;
}

namespace {

const token_embedding::saved& checked(const token_embedding& l, const tensor& dy, layer_cache& cache,
                                      std::size_t dim) {
  const auto& s = cache.get<token_embedding::saved>(l);
  check_dy_shape(dy, {s.ids.shape()[0], s.ids.shape()[1], dim}, l);
  return s;
}

}  // namespace

void token_embedding::backward_input(const tensor& dy, layer_cache& cache, tensor* dx) const {
  const saved& s = checked(*this, dy, cache, dim_);
  if (dx) accumulate_into(*dx, shape_of(s.ids), *this);
}

void token_embedding::backward_weight(const tensor& dy, layer_cache& cache) {
  const saved& s = checked(*this, dy, cache, dim_);
  const float* ids = s.ids.data();
  const float* pdy = dy.data();
  float* dw = dweight_.data();
  const std::size_t n = s.ids.size();
  // Note [op threads] in tensor/elementwise.hpp: split by column blocks; every column adds the tokens in order.
  const std::size_t blocks = (dim_ + column_block - 1) / column_block;
#pragma omp parallel if (std::ptrdiff_t(n * dim_) >= parallel_elements)
  {
    const auto [first, last] = thread_share(blocks);
    const std::size_t begin = first * column_block, end = std::min(dim_, last * column_block);
    for (std::size_t i = 0; i < n; ++i) {
      float* row = dw + static_cast<std::size_t>(ids[i]) * dim_;
      const float* d = pdy + i * dim_;
      for (std::size_t j = begin; j < end; ++j) row[j] += d[j];
    }
  }
}

std::vector<parameter> token_embedding::parameters(const std::string& prefix) {
  return {{prefix + "weight", &weight_, &dweight_}};
}

void token_embedding::initialize(std::uint64_t seed) {
  const float bound = 0.02f * std::sqrt(3.0f);  // U(-b, b) has standard deviation b / sqrt(3)
  splitmix64 random(seed);
  for (float& w : weight_) w = symmetric_unit_float(random.next()) * bound;
}

}  // namespace ap

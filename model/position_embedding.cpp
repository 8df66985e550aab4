#include "model/position_embedding.hpp"

#include "model/layer_spec.hpp"

#include <cmath>
#include <stdexcept>

#include "random/seeded_random.hpp"
#include "tensor/compute.hpp"
#include "tensor/elementwise.hpp"

namespace ap {

position_embedding::position_embedding(std::size_t context, std::size_t dim, float std)
    : context_(context), dim_(dim), std_(std), weight_(zeros({context, dim})), dweight_(zeros({context, dim})) {
  if (context == 0 || dim == 0) throw std::invalid_argument("Position needs positive sizes, got " + describe());
}

std::string position_embedding::describe() const {
  return "Position(" + std::to_string(context_) + "x" + std::to_string(dim_) + ")";
}

std::string position_embedding::spec() const {
  return "position:" + std::to_string(context_) + ":" + std::to_string(dim_) + init_options_text({std_, true});
}

tensor position_embedding::forward(const tensor& x, layer_cache& cache, const forward_context&) const {
  if (x.dimension() != 3 || x.shape()[2] != dim_ || x.shape()[1] > context_)
    throw std::invalid_argument(describe() + " takes (batch, sequence <= " + std::to_string(context_) + ", " +
                                std::to_string(dim_) + "), got input of shape " + shape_string(x));
  const std::size_t batch = x.shape()[0], seq = x.shape()[1];
  tensor y = tensor::from_shape(x.shape());  // (batch, sequence, dim)
  const float* px = x.data();
  const float* w = weight_.data();
  float* py = y.data();
  const std::size_t n = seq * dim_;
  const auto count = static_cast<std::ptrdiff_t>(batch * seq);  // Note [op threads] in tensor/elementwise.hpp
#pragma omp parallel for schedule(static) if (std::ptrdiff_t(batch * n) >= parallel_elements)
  for (std::ptrdiff_t bt = 0; bt < count; ++bt) {
    const std::size_t b = std::size_t(bt) / seq, i0 = (std::size_t(bt) % seq) * dim_;
    for (std::size_t i = i0; i < i0 + dim_; ++i) py[b * n + i] = px[b * n + i] + w[i];
  }
  cache.emplace<saved>().shape = x.shape();
  return y;
}

void position_embedding::backward_input(const tensor& dy, layer_cache& cache, tensor* dx) const {
  const shape_t& shape = cache.get<saved>(*this).shape;
  check_dy_shape(dy, shape, *this);
  if (!dx) return;
  bool fresh = false;
  float* pdx = accumulate_into(*dx, shape, *this, &fresh);
  if (fresh)
    parallel_copy(pdx, dy.data(), dy.byte_size());  // tensor/elementwise.hpp: dx = dy
  else
    add_into(pdx, dy.data(), dy.size());
}

void position_embedding::backward_weight(const tensor& dy, layer_cache& cache) {
  const shape_t& shape = cache.get<saved>(*this).shape;
  check_dy_shape(dy, shape, *this);
  const std::size_t batch = shape[0], n = shape[1] * dim_;
  const float* pdy = dy.data();
  float* dw = dweight_.data();
  // Note [op threads] in tensor/elementwise.hpp: split by columns; each adds the batch's rows in order.
#pragma omp parallel if (std::ptrdiff_t(batch * n) >= parallel_elements)
  {
    const auto [begin, end] = thread_share(n);
    for (std::size_t b = 0; b < batch; ++b)
      for (std::size_t i = begin; i < end; ++i) dw[i] += pdy[b * n + i];
  }
}

std::vector<parameter> position_embedding::parameters(const std::string& prefix) {
  return {{prefix + "weight", &weight_, &dweight_}};
}

void position_embedding::initialize(std::uint64_t seed) {
  if (std_ > 0.0f) return fill_normal(weight_, std_, seed);  // Note [GPT-2 initialisation] in gpt_spec.hpp
  const float bound = 0.02f * std::sqrt(3.0f);
  splitmix64 random(seed);
  for (float& w : weight_) w = symmetric_unit_float(random.next()) * bound;
}

}  // namespace ap

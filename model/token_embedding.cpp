#include "model/token_embedding.hpp"

#include "model/layer_spec.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <vector>

#include <omp.h>

#include "model/spec_text.hpp"
#include "random/seeded_random.hpp"
#include "tensor/compute.hpp"
#include "tensor/elementwise.hpp"

namespace ap {

token_embedding::token_embedding(std::size_t vocabulary, std::size_t dim, float std)
    : vocabulary_(vocabulary), dim_(dim), std_(std), weight_(zeros({vocabulary, dim})), dweight_(zeros({vocabulary, dim})) {
  if (vocabulary == 0 || dim == 0) throw std::invalid_argument("Embedding needs positive sizes, got " + describe());
}

std::string token_embedding::describe() const {
  return "Embedding(" + std::to_string(vocabulary_) + "x" + std::to_string(dim_) + ")";
}

std::string token_embedding::spec() const {
  return "embedding:" + std::to_string(vocabulary_) + ":" + std::to_string(dim_) + init_options_text({std_, true});
}

tensor token_embedding::forward(const tensor& x, layer_cache& cache, const forward_context&) const {
  tensor y = embedding_rows(*this, x, weight_, 0, vocabulary_);
  cache.emplace<saved>().ids = x;
  return y;
}

tensor embedding_rows(const layer& who, const tensor& x, const tensor& table, std::size_t first, std::size_t vocabulary) {
  if (x.dimension() != 2)
    throw std::invalid_argument(who.describe() + " takes token ids of shape (batch, sequence), got " + shape_string(x));
  const float* ids = x.data();
  const std::size_t n = x.size(), held = table.shape()[0], dim = table.shape()[1];
  for (std::size_t i = 0; i < n; ++i)
    if (!(ids[i] >= 0.0f && ids[i] < float(vocabulary) && ids[i] == std::floor(ids[i])))
      throw std::invalid_argument(who.describe() + ": the token id at (" + std::to_string(i / x.shape()[1]) + ", " +
                                  std::to_string(i % x.shape()[1]) + ") is " + format_float(ids[i]) +
                                  ", not an integer in [0, " + std::to_string(vocabulary) + ")");
  tensor y = tensor::from_shape({x.shape()[0], x.shape()[1], dim});  // (batch, sequence, dim)
  const float* w = table.data();
  float* py = y.data();
  const auto count = static_cast<std::ptrdiff_t>(n);  // Note [op threads] in tensor/elementwise.hpp
#pragma omp parallel for schedule(static) if (std::ptrdiff_t(n * dim) >= parallel_elements)
  for (std::ptrdiff_t i = 0; i < count; ++i) {
    const auto id = static_cast<std::size_t>(ids[i]);
    float* row = py + std::size_t(i) * dim;
    if (id >= first && id < first + held) std::memcpy(row, w + (id - first) * dim, dim * sizeof(float));
    else std::memset(row, 0, dim * sizeof(float));
  }
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
  add_embedding_gradient(checked(*this, dy, cache, dim_).ids, dy, dweight_, 0);
}

void add_embedding_gradient(const tensor& id_tensor, const tensor& dy, tensor& dtable, std::size_t first) {
  const float* ids = id_tensor.data();
  const float* pdy = dy.data();
  float* dw = dtable.data();
  const std::size_t n = id_tensor.size(), held = dtable.shape()[0], dim = dtable.shape()[1];
  // Note [embedding gradient by token]: each thread owns a range of token ids and adds, in row order, every dy
  // row of its tokens, so each dweight row is written by one thread in the serial loop's order and any thread
  // count gives the same bits. Ranges hold about equal numbers of rows (text is far from uniform), cut from a
  // count per id. Ids are held as local rows (id - first); one outside [first, first + held) is another rank's.
  const auto add_rows_of = [&](std::size_t lo, std::size_t hi) {
    for (std::size_t i = 0; i < n; ++i) {
      const auto id = static_cast<std::size_t>(ids[i]);
      if (id < first || id - first < lo || id - first >= hi) continue;
      float* row = dw + (id - first) * dim;
      const float* d = pdy + i * dim;
      for (std::size_t j = 0; j < dim; ++j) row[j] += d[j];
    }
  };
  if (std::ptrdiff_t(n * dim) < parallel_elements || compute_threads() == 1) return add_rows_of(0, held);
  std::vector<std::size_t> before(held + 1, 0);  // before[v]: held rows whose local id is below v
  for (std::size_t i = 0; i < n; ++i) {
    const auto id = static_cast<std::size_t>(ids[i]);
    if (id >= first && id - first < held) ++before[id - first + 1];
  }
  for (std::size_t v = 0; v < held; ++v) before[v + 1] += before[v];
  const std::size_t mine = before[held];
#pragma omp parallel
  {
    const auto t = static_cast<std::size_t>(omp_get_thread_num()), team = static_cast<std::size_t>(omp_get_num_threads());
    const auto first_id = [&](std::size_t k) {  // where share k starts: n * k / team rows below it
      if (k == team) return held;
      return static_cast<std::size_t>(std::lower_bound(before.begin(), before.end(), mine * k / team) - before.begin());
    };
    add_rows_of(first_id(t), first_id(t + 1));
  }
}

std::vector<parameter> token_embedding::parameters(const std::string& prefix) {
  return {{prefix + "weight", &weight_, &dweight_}};
}

void token_embedding::initialize(std::uint64_t seed) {
  if (std_ > 0.0f) return fill_normal(weight_, std_, seed);  // Note [GPT-2 initialisation] in gpt_spec.hpp
  const float bound = 0.02f * std::sqrt(3.0f);  // U(-b, b) has standard deviation b / sqrt(3)
  splitmix64 random(seed);
  for (float& w : weight_) w = symmetric_unit_float(random.next()) * bound;
}

}  // namespace ap

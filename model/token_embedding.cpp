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
  // Note [embedding gradient by token]: each thread owns a range of token ids and adds, in row order, every dy
  // row of its tokens: whole contiguous rows, each dweight row written by one thread, and one token's rows in
  // the serial loop's order, so any thread count gives the same bits. The ranges hold about equal numbers of
  // rows (text is far from uniform over bytes), cut from a count per id. (Split by column blocks instead, each
  // thread read every dy row in 64-byte pieces: 2 threads took 1.9x one thread's time at 64 x 128 x 256; in
  // halves of a row, 1.7x: the hardware's prefetch fetches the other half too. Each thread's rows fetched 4, 8
  // or 16 rows ahead by software prefetch: no faster, 0.24-0.27 ms against this loop's 0.22-0.25. Rows
  // put in token order first by a counting sort the team shares, each thread then reading only its own rows:
  // 0.50 efficiency on 2 threads against this loop's 0.66, as 1 KB rows read out of order take 1.4x the time of
  // the same rows read in order; the op is bound by reading dy, 8 MB at 64 x 128 x 256. A summation order other
  // than the serial loop's, fixed blocks of rows summed apart and then in order, would read dy in order on every
  // thread but change the bits of every trained model, for an op of 0.3 ms where one attention forward at the
  // same shape takes 29 ms on 2 threads: bench_ops, a 2-vCPU AMD EPYC VM. Tried stand-alone anyway,
  // 8 blocks of 1,024 rows, each summed into a dense or a compact table and the tables added by id ranges: 0.28
  // and 0.32 ms on 2 threads against this loop's 0.26-0.28 (and 0.53-0.56 against 0.39-0.42 on one). The loop's 2
  // threads take what one thread takes to stream all of dy, 0.28 ms for a bare sum of its rows: the hardware's
  // prefetch brings each core the rows between its own, so neither thread reads less than the whole of dy.)
  // Adds the dy rows of the tokens in [lo, hi), in row order.
  const auto add_rows_of = [&](std::size_t lo, std::size_t hi) {
    for (std::size_t i = 0; i < n; ++i) {
      const auto id = static_cast<std::size_t>(ids[i]);
      if (id < lo || id >= hi) continue;
      float* row = dw + id * dim_;
      const float* d = pdy + i * dim_;
      for (std::size_t j = 0; j < dim_; ++j) row[j] += d[j];
    }
  };
  if (std::ptrdiff_t(n * dim_) < parallel_elements || compute_threads() == 1) return add_rows_of(0, vocabulary_);
  std::vector<std::size_t> before(vocabulary_ + 1, 0);  // before[v]: rows whose id is below v
  for (std::size_t i = 0; i < n; ++i) ++before[static_cast<std::size_t>(ids[i]) + 1];
  for (std::size_t v = 0; v < vocabulary_; ++v) before[v + 1] += before[v];
#pragma omp parallel
  {
    const auto t = static_cast<std::size_t>(omp_get_thread_num()), team = static_cast<std::size_t>(omp_get_num_threads());
    const auto first_id = [&](std::size_t k) {  // where share k starts: n * k / team rows below it
      if (k == team) return vocabulary_;
      return static_cast<std::size_t>(std::lower_bound(before.begin(), before.end(), n * k / team) - before.begin());
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

#include "model/vocab_parallel.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "collective/shard.hpp"
#include "model/layer_spec.hpp"
#include "model/spec_text.hpp"
#include "model/token_embedding.hpp"
#include "tensor/compute.hpp"
#include "tensor/fast_exp.hpp"

namespace ap {

vocab_parallel_embedding::vocab_parallel_embedding(std::size_t vocabulary, std::size_t dim, float std)
    : vocabulary_(vocabulary), dim_(dim), std_(std), weight_(zeros({vocabulary, dim})), dweight_(zeros({vocabulary, dim})) {
  if (vocabulary == 0 || dim == 0) throw std::invalid_argument("VocabParallelEmbedding needs positive sizes, got " + describe());
}

std::string vocab_parallel_embedding::describe() const {
  return "VocabParallelEmbedding(" + std::to_string(vocabulary_) + "x" + std::to_string(dim_) + ")" +
         (group_ ? " rank " + std::to_string(group_->rank()) + " of " + std::to_string(group_->size()) : "");
}

std::string vocab_parallel_embedding::spec() const {
  return "vocab_embedding:" + std::to_string(vocabulary_) + ":" + std::to_string(dim_) + init_options_text({std_, true});
}

void vocab_parallel_embedding::join_group(std::shared_ptr<process_group> group) {
  if (group_) throw std::logic_error(describe() + " already joined group '" + group_->name() + "'");
  const auto size = static_cast<std::size_t>(group->size());
  if (vocabulary_ < size)
    throw std::invalid_argument(describe() + " cannot split its " + std::to_string(vocabulary_) + " tokens over " +
                                std::to_string(size) + " tensor-parallel ranks of group '" + group->name() + "'");
  const auto [first, last] = shard_rows(vocabulary_, size, static_cast<std::size_t>(group->rank()));
  weight_ = slice_rows(weight_, first, last);
  dweight_ = zeros({last - first, dim_});
  first_ = first;
  group_ = std::move(group);
}

void vocab_parallel_embedding::initialize(std::uint64_t seed) {
  token_embedding whole(vocabulary_, dim_, std_);  // Embedding's table of this seed, this rank's rows
  whole.initialize(seed);
  const tensor& table = *whole.parameters("").front().value;
  weight_ = slice_rows(table, first_, first_ + weight_.shape()[0]);
}

tensor vocab_parallel_embedding::forward(const tensor& x, layer_cache& cache, const forward_context&) const {
  tensor y = embedding_rows(*this, x, weight_, first_, vocabulary_);
  if (group_) group_->all_reduce(y).wait();  // each token's row from the one rank holding it, zeros elsewhere
  cache.emplace<saved>().ids = x;
  return y;
}

void vocab_parallel_embedding::backward_input(const tensor& dy, layer_cache& cache, tensor* dx) const {
  const auto& s = cache.get<saved>(*this);
  check_dy_shape(dy, {s.ids.shape()[0], s.ids.shape()[1], dim_}, *this);
  if (dx) accumulate_into(*dx, shape_of(s.ids), *this);  // ids have no gradient
}

void vocab_parallel_embedding::backward_weight(const tensor& dy, layer_cache& cache) {
  const auto& s = cache.get<saved>(*this);
  check_dy_shape(dy, {s.ids.shape()[0], s.ids.shape()[1], dim_}, *this);
  add_embedding_gradient(s.ids, dy, dweight_, first_);
}

std::vector<parameter> vocab_parallel_embedding::parameters(const std::string& prefix) {
  return {{prefix + "weight", &weight_, &dweight_}};
}

loss::loss_and_gradient vocab_parallel_cross_entropy(tensor&& logits, std::size_t first_class, std::size_t classes,
                                                     const tensor& labels, std::size_t batch_size, process_group& group) {
  if (logits.type() != dtype::float32 || labels.type() != dtype::float32)
    throw std::invalid_argument("cross_entropy takes float32 logits and labels, got " + describe(logits) + " and " +
                                describe(labels));
  const std::size_t n = rows(logits), c = cols(logits);
  if (labels.size() != n)
    throw std::invalid_argument("cross_entropy: " + std::to_string(n) + " rows of logits " + shape_string(logits) +
                                " and labels " + shape_string(labels) + " do not match: one class label per row");
  if (first_class + c > classes)
    throw std::invalid_argument("cross_entropy: columns [" + std::to_string(first_class) + ", " +
                                std::to_string(first_class + c) + ") of " + std::to_string(classes) + " classes");
  const float* y = labels.data();
  for (std::size_t r = 0; r < n; ++r)  // every rank checks every label, so all refuse alike before any exchange
    if (!(y[r] >= 0.0f && y[r] < float(classes) && y[r] == std::floor(y[r])))
      throw std::invalid_argument("row " + std::to_string(r) + " has label " + format_float(y[r]) +
                                  ", not a class index in [0, " + std::to_string(classes) + ")");
  const auto T = static_cast<std::size_t>(group.size()), me = static_cast<std::size_t>(group.rank());
  const std::size_t stride = 2 * T + 1;  // a row's exchange: every rank's maximum, every rank's sum, the target's logit
  tensor exchange = zeros({n, stride});
  float* x = logits.data();
  float* ex = exchange.data();
  const auto count = static_cast<std::ptrdiff_t>(n);
#pragma omp parallel for schedule(static) if (std::ptrdiff_t(n * c) * 8 >= parallel_elements)
  for (std::ptrdiff_t i = 0; i < count; ++i) {
    const auto r = std::size_t(i);
    const float* row = x + r * c;
    float max = -std::numeric_limits<float>::infinity();
    bool finite = true;
    for (std::size_t k = 0; k < c; ++k) finite = finite && std::isfinite(row[k]), max = std::max(max, row[k]);
    double sum = 0.0;
    for (std::size_t k = 0; k < c; ++k) sum += double(exp_nonpositive(row[k] - max));
    float* e = ex + r * stride;
    e[me] = c == 0 ? 0.0f : max;
    e[T + me] = finite ? static_cast<float>(sum) : std::numeric_limits<float>::quiet_NaN();  // every rank sees the NaN
    const auto label = static_cast<std::size_t>(y[r]);
    if (label >= first_class && label < first_class + c) e[2 * T] = row[label - first_class];
  }
  group.all_reduce(exchange).wait();  // each slot is written by one rank: the sum is that rank's number, exactly
  const double divisor = double(batch_size == 0 ? n : batch_size);
  std::vector<double> row_losses(n);
#pragma omp parallel for schedule(static) if (std::ptrdiff_t(n * c) * 8 >= parallel_elements)
  for (std::ptrdiff_t i = 0; i < count; ++i) {
    const auto r = std::size_t(i);
    const float* e = ex + r * stride;
    float max = -std::numeric_limits<float>::infinity();
    for (std::size_t k = 0; k < T; ++k) max = std::max(max, e[k]);
    double sum = 0.0;
    for (std::size_t k = 0; k < T; ++k) sum += double(e[T + k]) * std::exp(double(e[k]) - double(max));
    const double log_sum = double(max) + std::log(sum);
    row_losses[r] = log_sum - double(e[2 * T]);
    float* row = x + r * c;
    const auto label = static_cast<std::size_t>(y[r]);
    const double inverse = 1.0 / sum;  // softmax_k = exp(x_k - max) / sum, each exp float32 (Note [fast exp])
    for (std::size_t k = 0; k < c; ++k)
      row[k] = static_cast<float>((double(exp_nonpositive(row[k] - max)) * inverse - (first_class + k == label ? 1.0 : 0.0)) /
                                  divisor);
  }
  double total = 0.0;
  for (std::size_t r = 0; r < n; ++r) {
    if (!std::isfinite(row_losses[r]))
      throw std::domain_error("cross_entropy: the loss of row " + std::to_string(r) + " is not finite");
    total += row_losses[r];
  }
  return {static_cast<float>(total / divisor), std::move(logits)};
}

bool splits_vocabulary(const std::vector<std::string>& specs, const std::string& loss, int tensor_parallel) {
  if (tensor_parallel <= 1 || loss != "cross_entropy" || specs.size() < 2) return false;
  const layer_spec first = parse_layer_spec(specs.front()), last = parse_layer_spec(specs.back());
  if (first.kind != "embedding" || last.kind != "linear" || first.positional_fields() < 2 || last.positional_fields() < 2)
    return false;
  const std::size_t vocabulary = first.width(0);
  return last.width(1) == vocabulary && vocabulary >= static_cast<std::size_t>(tensor_parallel);
}

}  // namespace ap

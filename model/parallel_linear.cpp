#include "model/parallel_linear.hpp"

#include <cstring>
#include <stdexcept>

#include "collective/shard.hpp"
#include "model/linear.hpp"
#include "tensor/elementwise.hpp"
#include "tensor/matmul.hpp"

namespace ap {

namespace {

shape_t with_last_axis(const tensor& x, std::size_t width) {
  shape_t shape = shape_of(x);
  if (shape.empty()) shape.push_back(width);
  shape.back() = width;
  return shape;
}

std::string shard_text(const std::shared_ptr<process_group>& group) {
  return group ? " rank " + std::to_string(group->rank()) + " of " + std::to_string(group->size()) : "";
}

// Columns [first, last) of each of the `blocks` equal column blocks of the (rows, cols) matrix (or vector)
// `m`, side by side (Note [shard blocks]).
tensor columns(const tensor& m, std::size_t blocks, std::size_t first, std::size_t last) {
  const std::size_t r = m.dimension() == 1 ? 1 : m.shape()[0], c = m.shape().back(), w = last - first;
  const std::size_t block = c / blocks;
  tensor out = tensor::from_shape(m.dimension() == 1 ? shape_t{blocks * w} : shape_t{r, blocks * w});
  for (std::size_t i = 0; i < r; ++i)
    for (std::size_t b = 0; b < blocks; ++b)
      std::memcpy(out.data() + (i * blocks + b) * w, m.data() + i * c + b * block + first, w * sizeof(float));
  return out;
}

// The shard of `width` that rank `group` holds; refuses a width the group's size does not divide.
std::pair<std::size_t, std::size_t> split(const layer& who, std::size_t width, const char* what,
                                          const process_group& group) {
  const auto size = static_cast<std::size_t>(group.size());
  if (width % size != 0)
    throw std::invalid_argument(who.describe() + " cannot split its " + std::to_string(width) + " " + what +
                                " over " + std::to_string(size) + " tensor-parallel ranks of group '" +
                                group.name() + "': " + std::to_string(size) + " does not divide " +
                                std::to_string(width));
  return shard_rows(width, size, static_cast<std::size_t>(group.rank()));
}

}  // namespace

// ---- column_parallel_linear ----

column_parallel_linear::column_parallel_linear(std::size_t in, std::size_t out, std::size_t blocks, init_options init)
    : in_(in), out_(out), blocks_(blocks), init_(init), last_(blocks == 0 ? out : out / blocks), weight_(zeros({in, out})),
      bias_(zeros({out})), dweight_(zeros({in, out})), dbias_(zeros({out})) {
  if (in == 0 || out == 0) throw std::invalid_argument("ColumnParallelLinear needs positive widths, got " + describe());
  if (blocks == 0 || out % blocks != 0)
    throw std::invalid_argument(describe() + ": " + std::to_string(blocks) + " column blocks do not divide its " +
                                std::to_string(out) + " outputs");
}

std::string column_parallel_linear::describe() const {
  return "ColumnParallelLinear(" + std::to_string(in_) + "->" + std::to_string(out_) +
         (blocks_ == 1 ? "" : " in " + std::to_string(blocks_) + " blocks") + ")" + shard_text(group_);
}

std::string column_parallel_linear::spec() const {
  return "column_linear:" + std::to_string(in_) + ":" + std::to_string(out_) +
         (blocks_ == 1 ? "" : ":" + std::to_string(blocks_)) + init_options_text(init_);
}

void column_parallel_linear::join_group(std::shared_ptr<process_group> group) {
  if (group_) throw std::logic_error(describe() + " already joined group '" + group_->name() + "'");
  const auto [first, last] = split(*this, out_ / blocks_, blocks_ == 1 ? "output columns" : "columns per block", *group);
  weight_ = columns(weight_, blocks_, first, last);
  bias_ = columns(bias_, blocks_, first, last);
  first_ = first;
  last_ = last;
  dweight_ = zeros({in_, width()});
  dbias_ = zeros({width()});
  group_ = std::move(group);
}

void column_parallel_linear::initialize(std::uint64_t seed) {
  linear whole(in_, out_, init_);  // the same weights as Linear with this seed, then this rank's slice
  whole.initialize(seed);
  const auto p = whole.parameters("");
  weight_ = columns(*p[0].value, blocks_, first_, last_);
  if (init_.bias) bias_ = columns(*p[1].value, blocks_, first_, last_);
}

tensor column_parallel_linear::forward(const tensor& x, layer_cache& cache, const forward_context&) const {
  return forward_keeping(x, nullptr, cache);
}

tensor column_parallel_linear::forward_owned(tensor&& x, layer_cache& cache, const forward_context&) const {
  return forward_keeping(x, &x, cache);  // Note [owned input]: x becomes the stash, uncopied
}

tensor column_parallel_linear::forward_keeping(const tensor& x, tensor* owned, layer_cache& cache) const {
  if (cols(x) != in_)
    throw std::invalid_argument(describe() + " takes " + std::to_string(in_) + " features, got input of shape " +
                                shape_string(x));
  const std::size_t n = rows(x), w = width();
  tensor y = tensor::from_shape(with_last_axis(x, w));  // (rows, w)
  gemm_bias(n, w, in_, x.data(), weight_.data(), bias_.data(), y.data());  // Note [bias in the product]
  saved& s = cache.emplace<saved>();
  stash_input(s.x, x, owned);
  return y;
}

column_parallel_linear::pending_dx column_parallel_linear::start_backward_input(const tensor& dy, layer_cache& cache,
                                                                              tensor* dx) const {
  const tensor& x = cache.get<saved>(*this).x;
  const std::size_t w = width();
  check_dy_shape(dy, with_last_axis(x, w), *this);
  pending_dx pending;
  if (!dx) return pending;
  if (!group_) {  // as Linear: straight into dx
    bool fresh = false;
    float* pdx = accumulate_into(*dx, shape_of(x), *this, &fresh);
    gemm(false, true, rows(dy), in_, w, 1.0f, dy.data(), weight_.data(), fresh ? 0.0f : 1.0f, pdx);
    return pending;
  }
  // Only the partial dx is summed over the ranks: what dx already holds is whole on every rank.
  pending.partial = tensor::from_shape(shape_of(x));  // (rows, in)
  gemm(false, true, rows(dy), in_, w, 1.0f, dy.data(), weight_.data(), 0.0f, pending.partial.data());
  pending.sum = group_->all_reduce(pending.partial);
  pending.dx = dx;
  return pending;
}

column_parallel_linear::pending_dx::~pending_dx() {
  if (!dx) return;
  try {
    sum.wait();
  } catch (...) {  // the step fails anyway; the buffer is free once the wait returns
  }
}

void column_parallel_linear::finish_backward_input(pending_dx& pending) const {
  if (!pending.dx) return;
  pending.sum.wait();
  accumulate_elementwise(*pending.dx, pending.partial.shape(), *this,
                         [p = pending.partial.data()](std::size_t i) { return p[i]; });
  pending.dx = nullptr;
}

void column_parallel_linear::backward_input(const tensor& dy, layer_cache& cache, tensor* dx) const {
  pending_dx pending = start_backward_input(dy, cache, dx);
  finish_backward_input(pending);
}

void column_parallel_linear::backward(const tensor& dy, layer_cache& cache, tensor* dx) {
  pending_dx pending = start_backward_input(dy, cache, dx);
  backward_weight(dy, cache);  // while the group sums the partial dx
  finish_backward_input(pending);
}

void column_parallel_linear::backward_weight(const tensor& dy, layer_cache& cache) {
  const tensor& x = cache.get<saved>(*this).x;
  const std::size_t w = width();
  check_dy_shape(dy, with_last_axis(x, w), *this);
  gemm(true, false, in_, w, rows(dy), 1.0f, x.data(), dy.data(), 1.0f, dweight_.data());
  if (init_.bias) add_column_sums(dy.data(), rows(dy), w, dbias_.data());  // Note [row-block sums]
}

std::vector<parameter> column_parallel_linear::parameters(const std::string& prefix) {
  if (!init_.bias) return {{prefix + "weight", &weight_, &dweight_}};
  return {{prefix + "weight", &weight_, &dweight_}, {prefix + "bias", &bias_, &dbias_}};
}

// ---- row_parallel_linear ----

row_parallel_linear::row_parallel_linear(std::size_t in, std::size_t out, init_options init)
    : in_(in), out_(out), init_(init), last_(in), weight_(zeros({in, out})), bias_(zeros({out})), dweight_(zeros({in, out})),
      dbias_(zeros({out})) {
  if (in == 0 || out == 0) throw std::invalid_argument("RowParallelLinear needs positive widths, got " + describe());
}

std::string row_parallel_linear::describe() const {
  return "RowParallelLinear(" + std::to_string(in_) + "->" + std::to_string(out_) + ")" + shard_text(group_);
}

std::string row_parallel_linear::spec() const {
  return "row_linear:" + std::to_string(in_) + ":" + std::to_string(out_) + init_options_text(init_);
}

void row_parallel_linear::join_group(std::shared_ptr<process_group> group) {
  if (group_) throw std::logic_error(describe() + " already joined group '" + group_->name() + "'");
  const auto [first, last] = split(*this, in_, "input rows", *group);
  weight_ = slice_rows(weight_, first, last);
  dweight_ = zeros({last - first, out_});
  first_ = first;
  last_ = last;
  group_ = std::move(group);
}

void row_parallel_linear::initialize(std::uint64_t seed) {
  linear whole(in_, out_, init_);
  whole.initialize(seed);
  const auto p = whole.parameters("");
  weight_ = slice_rows(*p[0].value, first_, last_);
  if (init_.bias) bias_ = *p[1].value;
}

tensor row_parallel_linear::forward(const tensor& x, layer_cache& cache, const forward_context&) const {
  return forward_keeping(x, nullptr, cache);
}

tensor row_parallel_linear::forward_owned(tensor&& x, layer_cache& cache, const forward_context&) const {
  return forward_keeping(x, &x, cache);  // Note [owned input]: x becomes the stash, uncopied
}

tensor row_parallel_linear::forward_keeping(const tensor& x, tensor* owned, layer_cache& cache) const {
  const std::size_t w = last_ - first_;
  if (cols(x) != w)
    throw std::invalid_argument(describe() + " takes " + std::to_string(w) + " features" +
                                (group_ ? " (its shard of " + std::to_string(in_) + ")" : std::string()) +
                                ", got input of shape " + shape_string(x));
  const std::size_t n = rows(x);
  tensor y = tensor::from_shape(with_last_axis(x, out_));  // (rows, out)
  gemm(false, false, n, out_, w, 1.0f, x.data(), weight_.data(), 0.0f, y.data());
  if (group_) group_->all_reduce(y).wait();  // the ranks' partial products, summed in rank order
  add_to_rows(y.data(), n, bias_.data(), out_);
  saved& s = cache.emplace<saved>();
  stash_input(s.x, x, owned);
  return y;
}

void row_parallel_linear::backward_input(const tensor& dy, layer_cache& cache, tensor* dx) const {
  const tensor& x = cache.get<saved>(*this).x;
  check_dy_shape(dy, with_last_axis(x, out_), *this);
  if (!dx) return;
  bool fresh = false;
  float* pdx = accumulate_into(*dx, shape_of(x), *this, &fresh);  // (rows, w): this rank's shard, no collective
  gemm(false, true, rows(dy), last_ - first_, out_, 1.0f, dy.data(), weight_.data(), fresh ? 0.0f : 1.0f, pdx);
}

void row_parallel_linear::backward_weight(const tensor& dy, layer_cache& cache) {
  const tensor& x = cache.get<saved>(*this).x;
  check_dy_shape(dy, with_last_axis(x, out_), *this);
  gemm(true, false, last_ - first_, out_, rows(dy), 1.0f, x.data(), dy.data(), 1.0f, dweight_.data());
  if (init_.bias) add_column_sums(dy.data(), rows(dy), out_, dbias_.data());  // Note [row-block sums]
}

std::vector<parameter> row_parallel_linear::parameters(const std::string& prefix) {
  if (!init_.bias) return {{prefix + "weight", &weight_, &dweight_}};
  return {{prefix + "weight", &weight_, &dweight_}, {prefix + "bias", &bias_, &dbias_}};
}

}  // namespace ap

#include "model/parallel_linear.hpp"

#include <algorithm>
#include <cstring>
#include <functional>
#include <stdexcept>

#include "collective/shard.hpp"
#include "model/linear.hpp"
#include "model/sequence_parallel.hpp"
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

// Columns [first, last) of each block of `widths` of the (rows, cols) matrix (or vector) `m`, side by side
// (Note [shard blocks]).
tensor columns(const tensor& m, const std::vector<std::size_t>& widths,
               const std::vector<std::pair<std::size_t, std::size_t>>& held) {
  const std::size_t r = m.dimension() == 1 ? 1 : m.shape()[0], c = m.shape().back();
  std::size_t w = 0;
  for (const auto& [first, last] : held) w += last - first;
  tensor out = tensor::from_shape(m.dimension() == 1 ? shape_t{w} : shape_t{r, w});
  for (std::size_t i = 0; i < r; ++i) {
    std::size_t start = 0, at = i * w;
    for (std::size_t b = 0; b < widths.size(); ++b) {
      const auto [first, last] = held[b];
      std::memcpy(out.data() + at, m.data() + i * c + start + first, (last - first) * sizeof(float));
      at += last - first, start += widths[b];
    }
  }
  return out;
}

// `blocks` equal widths of `out` columns; none when blocks does not divide out.
std::vector<std::size_t> equal_widths(std::size_t out, std::size_t blocks) {
  if (blocks == 0 || out % blocks != 0) return {};
  return std::vector<std::size_t>(blocks, out / blocks);
}

std::size_t sum_of(const std::vector<std::size_t>& widths) {
  std::size_t n = 0;
  for (std::size_t w : widths) n += w;
  return n;
}

// Every block whole: what an unsplit layer holds.
std::vector<std::pair<std::size_t, std::size_t>> whole_blocks(const std::vector<std::size_t>& widths) {
  std::vector<std::pair<std::size_t, std::size_t>> held;
  for (std::size_t w : widths) held.emplace_back(0, w);
  return held;
}

// Rank `group`'s shard of `width`; refuses a width the group does not divide, unless `uneven`.
std::pair<std::size_t, std::size_t> split(const layer& who, std::size_t width, const char* what,
                                          const process_group& group, bool uneven = false) {
  const auto size = static_cast<std::size_t>(group.size());
  if (uneven ? width < size : width % size != 0)
    throw std::invalid_argument(who.describe() + " cannot split its " + std::to_string(width) + " " + what +
                                " over " + std::to_string(size) + " tensor-parallel ranks of group '" +
                                group.name() + "': " + std::to_string(size) + " does not divide " +
                                std::to_string(width));
  return shard_rows(width, size, static_cast<std::size_t>(group.rank()));
}

}  // namespace

shard_layout::shard_layout(int along, const std::vector<std::size_t>& block_lengths)
    : axis(along), blocks(block_lengths.size()) {
  if (std::adjacent_find(block_lengths.begin(), block_lengths.end(), std::not_equal_to<>()) != block_lengths.end())
    lengths = block_lengths;
}

// ---- column_parallel_linear ----

column_parallel_linear::column_parallel_linear(std::size_t in, std::size_t out, std::size_t blocks, init_options init,
                                               head_options head)
    : in_(in), out_(out), widths_(equal_widths(out, blocks)), init_(init), head_(head), held_(whole_blocks(widths_)),
      weight_(zeros({in, out})), bias_(zeros({out})), dweight_(zeros({in, out})), dbias_(zeros({out})) {
  if (in == 0 || out == 0) throw std::invalid_argument("ColumnParallelLinear needs positive widths, got " + describe());
  if (widths_.empty())
    throw std::invalid_argument(describe() + ": " + std::to_string(blocks) + " column blocks do not divide its " +
                                std::to_string(out) + " outputs");
  if ((head.vocabulary || head.tie) && blocks != 1)
    throw std::invalid_argument(describe() + ": a vocabulary head or a tied weight is one block of columns");
}

column_parallel_linear::column_parallel_linear(std::size_t in, const std::vector<std::size_t>& block_widths,
                                               init_options init)
    : in_(in), out_(sum_of(block_widths)), widths_(block_widths), init_(init), held_(whole_blocks(widths_)),
      weight_(zeros({in, out_})), bias_(zeros({out_})), dweight_(zeros({in, out_})), dbias_(zeros({out_})) {
  if (in == 0 || widths_.empty() || std::count(widths_.begin(), widths_.end(), std::size_t{0}) > 0)
    throw std::invalid_argument("ColumnParallelLinear needs positive widths, got " + describe());
}

std::size_t column_parallel_linear::width() const {
  std::size_t w = 0;
  for (const auto& [first, last] : held_) w += last - first;
  return w;
}

namespace {

// "16+8+8" for blocks of unequal widths, the count for equal ones.
std::string blocks_text(const std::vector<std::size_t>& widths) {
  if (std::adjacent_find(widths.begin(), widths.end(), std::not_equal_to<>()) == widths.end())
    return std::to_string(widths.size());
  std::string text;
  for (std::size_t w : widths) text += (text.empty() ? "" : "+") + std::to_string(w);
  return text;
}

}  // namespace

std::string column_parallel_linear::describe() const {
  const std::string blocks = blocks_text(widths_);
  return "ColumnParallelLinear(" + std::to_string(in_) + "->" + std::to_string(out_) +
         (widths_.size() <= 1 ? "" : " in " + blocks + " blocks") + (head_.vocabulary ? ", vocabulary" : "") + ")" +
         shard_text(group_);
}

std::string column_parallel_linear::spec() const {
  return "column_linear:" + std::to_string(in_) + ":" + std::to_string(out_) +
         (widths_.size() <= 1 ? "" : ":" + blocks_text(widths_)) + init_options_text(init_) +
         (head_.tie ? ":tie=" + std::to_string(*head_.tie) : "") + (head_.vocabulary ? ":vocab=1" : "");
}

void column_parallel_linear::join_group(std::shared_ptr<process_group> group) {
  if (group_) throw std::logic_error(describe() + " already joined group '" + group_->name() + "'");
  std::vector<std::pair<std::size_t, std::size_t>> held;
  for (std::size_t w : widths_)
    held.push_back(split(*this, w, widths_.size() == 1 ? "output columns" : "columns per block", *group, head_.vocabulary));
  weight_ = columns(weight_, widths_, held);
  bias_ = columns(bias_, widths_, held);
  held_ = std::move(held);
  dweight_ = zeros({in_, width()});
  dbias_ = zeros({width()});
  group_ = std::move(group);
}

void column_parallel_linear::set_sequence_parallel(bool on) {
  if (on && (!group_ || head_.vocabulary || head_.tie))
    throw std::logic_error(describe() + ": sequence parallelism needs a group, and a layer that is no head");
  sequence_ = on;
}

void column_parallel_linear::initialize(std::uint64_t seed) {
  linear whole(in_, out_, init_, head_.tie);  // Linear's weights of this seed, this rank's slice
  whole.initialize(seed);
  const auto p = whole.parameters("");
  weight_ = columns(*p[0].value, widths_, held_);
  if (init_.bias) bias_ = columns(*p[1].value, widths_, held_);
}

tensor column_parallel_linear::forward(const tensor& x, layer_cache& cache, const forward_context&) const {
  return forward_keeping(x, nullptr, cache);
}

tensor column_parallel_linear::forward_owned(tensor&& x, layer_cache& cache, const forward_context&) const {
  return forward_keeping(x, &x, cache);  // Note [owned input]
}

tensor column_parallel_linear::forward_keeping(const tensor& x, tensor* owned, layer_cache& cache) const {
  if (cols(x) != in_)
    throw std::invalid_argument(describe() + " takes " + std::to_string(in_) + " features, got input of shape " +
                                shape_string(x));
  const std::size_t w = width();
  const tensor gathered = sequence_ ? sequence_gather(x, *group_) : tensor{};  // Note [sequence parallelism]
  const tensor& in = sequence_ ? gathered : x;
  tensor y = tensor::from_shape(with_last_axis(in, w));  // (rows, w)
  gemm_bias(rows(in), w, in_, in.data(), weight_.data(), bias_.data(), y.data());  // Note [bias in the product]
  saved& s = cache.emplace<saved>();
  stash_input(s.x, x, owned);  // on sequence shards, this rank's rows only
  return y;
}

column_parallel_linear::pending_dx column_parallel_linear::start_backward_input(const tensor& dy, layer_cache& cache,
                                                                              tensor* dx) const {
  const tensor& x = cache.get<saved>(*this).x;
  const std::size_t w = width();
  const shape_t x_shape = sequence_ ? sequence_whole_shape(x.shape(), static_cast<std::size_t>(group_->size())) : x.shape();
  shape_t y_shape = x_shape;
  if (y_shape.empty()) y_shape.push_back(w);
  y_shape.back() = w;
  check_dy_shape(dy, y_shape, *this);
  pending_dx pending;
  if (!dx) return pending;
  if (!group_) {  // as Linear: straight into dx
    bool fresh = false;
    float* pdx = accumulate_into(*dx, shape_of(x), *this, &fresh);
    gemm(false, true, rows(dy), in_, w, 1.0f, dy.data(), weight_.data(), fresh ? 0.0f : 1.0f, pdx);
    return pending;
  }
  // Only the partial dx is summed: dx's earlier contents are whole on every rank.
  pending.partial = tensor::from_shape(x_shape);  // (rows, in)
  gemm(false, true, rows(dy), in_, w, 1.0f, dy.data(), weight_.data(), 0.0f, pending.partial.data());
  if (sequence_) {  // this rank's rows of the sum (Note [sequence parallelism])
    pending.shape = x.shape();
    pending.sum = start_sequence_reduce_scatter(pending.partial, pending.rows, *group_);
  } else {
    pending.sum = group_->all_reduce(pending.partial);
  }
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
  if (!pending.shape.empty()) pending.rows.reshape(pending.shape);
  const tensor& sum = pending.shape.empty() ? pending.partial : pending.rows;
  accumulate_elementwise(*pending.dx, sum.shape(), *this, [p = sum.data()](std::size_t i) { return p[i]; });
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
  const tensor& kept = cache.get<saved>(*this).x;
  const tensor gathered = sequence_ ? sequence_gather(kept, *group_) : tensor{};  // Note [sequence parallelism]
  const tensor& x = sequence_ ? gathered : kept;
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

void row_parallel_linear::set_sequence_parallel(bool on) {
  if (on && !group_) throw std::logic_error(describe() + ": sequence parallelism needs a group");
  sequence_ = on;
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
  return forward_keeping(x, &x, cache);  // Note [owned input]
}

tensor row_parallel_linear::forward_keeping(const tensor& x, tensor* owned, layer_cache& cache) const {
  const std::size_t w = last_ - first_;
  if (cols(x) != w)
    throw std::invalid_argument(describe() + " takes " + std::to_string(w) + " features" +
                                (group_ ? " (its shard of " + std::to_string(in_) + ")" : std::string()) +
                                ", got input of shape " + shape_string(x));
  tensor y = tensor::from_shape(with_last_axis(x, out_));  // (rows, out)
  gemm(false, false, rows(x), out_, w, 1.0f, x.data(), weight_.data(), 0.0f, y.data());
  if (sequence_) {  // this rank's rows of the sum (Note [sequence parallelism])
    const shape_t mine = sequence_shard_shape(y.shape(), static_cast<std::size_t>(group_->size()), describe());
    tensor sum;
    start_sequence_reduce_scatter(y, sum, *group_).wait();
    sum.reshape(mine);
    y = std::move(sum);
  } else if (group_) {
    group_->all_reduce(y).wait();  // partial products, summed in rank order
  }
  add_to_rows(y.data(), rows(y), bias_.data(), out_);
  saved& s = cache.emplace<saved>();
  stash_input(s.x, x, owned);
  return y;
}

shape_t row_parallel_linear::output_shape(const shape_t& whole) const {
  return sequence_ ? sequence_shard_shape(whole, static_cast<std::size_t>(group_->size()), describe()) : whole;
}

const tensor& row_parallel_linear::whole_dy(const tensor& dy, saved& s) const {
  if (!sequence_) return dy;
  if (!s.dy) s.dy = sequence_gather(dy, *group_);  // Note [sequence parallelism]
  return *s.dy;
}

void row_parallel_linear::backward_input(const tensor& dy_given, layer_cache& cache, tensor* dx) const {
  saved& s = cache.get<saved>(*this);
  const tensor& x = s.x;
  s.dy.reset();  // a new backward: gather this one's dy
  const tensor& dy = whole_dy(dy_given, s);
  check_dy_shape(dy, with_last_axis(x, out_), *this);
  if (!dx) return;
  bool fresh = false;
  float* pdx = accumulate_into(*dx, shape_of(x), *this, &fresh);  // (rows, w): this rank's shard, no collective
  gemm(false, true, rows(dy), last_ - first_, out_, 1.0f, dy.data(), weight_.data(), fresh ? 0.0f : 1.0f, pdx);
}

void row_parallel_linear::backward_weight(const tensor& dy_given, layer_cache& cache) {
  saved& s = cache.get<saved>(*this);
  const tensor& x = s.x;
  const tensor& dy = whole_dy(dy_given, s);
  check_dy_shape(dy, with_last_axis(x, out_), *this);
  gemm(true, false, last_ - first_, out_, rows(dy), 1.0f, x.data(), dy.data(), 1.0f, dweight_.data());
  if (init_.bias) add_column_sums(dy.data(), rows(dy), out_, dbias_.data());  // Note [row-block sums]
  s.dy.reset();
}

std::vector<parameter> row_parallel_linear::parameters(const std::string& prefix) {
  if (!init_.bias) return {{prefix + "weight", &weight_, &dweight_}};
  return {{prefix + "weight", &weight_, &dweight_}, {prefix + "bias", &bias_, &dbias_}};
}

}  // namespace ap

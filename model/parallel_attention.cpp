#include "model/parallel_attention.hpp"

#include <algorithm>
#include <stdexcept>

#include "random/seeded_random.hpp"

namespace ap {

namespace {

// dim, checked before the projections are built, so the error names the heads.
std::size_t checked_dim(std::size_t dim, std::size_t heads, const attention_init& init) {
  check_attention_shape("HeadParallelAttention", dim, heads, init);
  return dim;
}

std::size_t kv_of(std::size_t heads, const attention_init& init) { return init.kv_heads ? init.kv_heads : heads; }

}  // namespace

// q, k and v: blocks of D, K d and K d columns, each cut per head over the ranks.
head_parallel_attention::head_parallel_attention(std::size_t dim, std::size_t heads, attention_init init)
    : dim_(checked_dim(dim, heads, init)), heads_(heads), kv_heads_(kv_of(heads, init)), local_heads_(heads),
      local_kv_heads_(kv_heads_), init_(init.kv_heads == heads ? attention_init{init.qkv, init.proj, 0, init.rope} : init),
      qkv_(dim, {dim, kv_heads_ * (dim / heads), kv_heads_ * (dim / heads)}, init.qkv), proj_(dim, dim, init.proj) {}

std::string head_parallel_attention::describe() const {
  return "HeadParallelAttention(" + std::to_string(dim_) + ", " + std::to_string(heads_) + " heads" +
         (kv_heads_ != heads_ ? ", " + std::to_string(kv_heads_) + " kv heads" : "") +
         (init_.rope > 0.0f ? ", rope" : "") + ")" +
         (group_ ? " rank " + std::to_string(group_->rank()) + " of " + std::to_string(group_->size()) : "");
}

double head_parallel_attention::flops_per_row() const {
  const double d = double(dim_), kv = double(kv_heads_) * double(dim_ / heads_);
  return 2.0 * d * (d + 2.0 * kv) + 2.0 * d * d;
}

std::string head_parallel_attention::spec() const {
  return "head_parallel_attention:" + std::to_string(dim_) + ":" + std::to_string(heads_) + attention_init_text(init_);
}

void head_parallel_attention::join_group(std::shared_ptr<process_group> group) {
  if (group_) throw std::logic_error(describe() + " already joined group '" + group_->name() + "'");
  const auto size = static_cast<std::size_t>(group->size());
  if (heads_ % size != 0)
    throw std::invalid_argument(describe() + " cannot split its " + std::to_string(heads_) + " heads over " +
                                std::to_string(size) + " tensor-parallel ranks of group '" + group->name() + "': " +
                                std::to_string(size) + " does not divide " + std::to_string(heads_));
  if (kv_heads_ % size != 0)  // a rank takes whole groups of heads (Note [grouped-query attention])
    throw std::invalid_argument(describe() + " cannot split its " + std::to_string(kv_heads_) + " kv heads over " +
                                std::to_string(size) + " tensor-parallel ranks of group '" + group->name() + "': " +
                                std::to_string(size) + " does not divide " + std::to_string(kv_heads_) +
                                " (each rank takes whole groups of heads sharing a kv head)");
  // T divides K and so H, so shard_rows gives rank r the q columns of heads [r H / T, (r + 1) H / T) and the k, v
  // columns of their kv heads, and the matching projection rows.
  qkv_.join_group(group);
  proj_.join_group(group);
  local_heads_ = heads_ / size;
  local_kv_heads_ = kv_heads_ / size;
  group_ = std::move(group);
}

std::vector<tensor_parallel_layer::sharded_value> head_parallel_attention::sharded_values() const {
  std::vector<sharded_value> all = qkv_.sharded_values();
  for (const sharded_value& v : proj_.sharded_values()) all.push_back(v);
  return all;
}

void head_parallel_attention::initialize(std::uint64_t seed) {
  qkv_.initialize(hash_counters(seed, 0));  // causal_self_attention's seeds
  proj_.initialize(hash_counters(seed, 1));
}

void head_parallel_attention::set_compute_dtype(dtype type) {
  layer::set_compute_dtype(type);
  qkv_.set_compute_dtype(type);
  proj_.set_compute_dtype(type);
}

head_parallel_attention::saved& head_parallel_attention::start_forward(const tensor& x, layer_cache& cache) const {
  if (x.dimension() != 3 || x.shape()[2] != dim_)
    throw std::invalid_argument(describe() + " takes (batch, sequence, " + std::to_string(dim_) +
                                "), got input of shape " + shape_string(x));
  saved& s = cache.emplace<saved>();
  s.input_done = false;
  return s;
}

tensor head_parallel_attention::heads_and_projection(const tensor& qkv, saved& s, const forward_context& ctx) const {
  tensor merged = attention_heads_forward(qkv, {local_heads_, local_kv_heads_, init_.rope}, compute_dtype(), s.heads);
  return proj_.forward_owned(std::move(merged), s.proj, ctx);  // the one all-reduce, then the bias
}

tensor head_parallel_attention::forward(const tensor& x, layer_cache& cache, const forward_context& ctx) const {
  saved& s = start_forward(x, cache);
  return heads_and_projection(qkv_.forward(x, s.qkv, ctx), s, ctx);  // qkv: (B, T, 3w), no collective
}

tensor head_parallel_attention::forward_owned(tensor&& x, layer_cache& cache, const forward_context& ctx) const {
  saved& s = start_forward(x, cache);
  return heads_and_projection(qkv_.forward_owned(std::move(x), s.qkv, ctx), s, ctx);  // Note [owned input]
}

// Up to the QKV projection's input gradient, left summing in the group (the backward's one all-reduce).
column_parallel_linear::pending_dx head_parallel_attention::start_backward_input(const tensor& dy, layer_cache& cache,
                                                                                tensor* dx) const {
  saved& s = cache.get<saved>(*this);
  const std::size_t batch = s.heads.q.shape()[0] / local_heads_, t = s.heads.q.shape()[1];
  check_dy_shape(dy, proj_.output_shape({batch, t, dim_}), *this);
  tensor dmerged;  // (B, T, w): this rank's heads, no collective
  proj_.backward_input(dy, s.proj, &dmerged);
  attention_heads_backward(dmerged, {local_heads_, local_kv_heads_, init_.rope}, s.heads, s.dqkv);
  auto pending = qkv_.start_backward_input(s.dqkv, s.qkv, dx);
  s.input_done = true;
  return pending;
}

void head_parallel_attention::backward_input(const tensor& dy, layer_cache& cache, tensor* dx) const {
  auto pending = start_backward_input(dy, cache, dx);
  qkv_.finish_backward_input(pending);
}

void head_parallel_attention::backward(const tensor& dy, layer_cache& cache, tensor* dx) {
  auto pending = start_backward_input(dy, cache, dx);
  backward_weight(dy, cache);  // while the group sums the partial dx
  qkv_.finish_backward_input(pending);
}

void head_parallel_attention::backward_weight(const tensor& dy, layer_cache& cache) {
  saved& s = cache.get<saved>(*this);
  if (!s.input_done)
    throw std::invalid_argument(describe() + " backward_weight: run backward_input first (it computes the QKV dy)");
  proj_.backward_weight(dy, s.proj);
  qkv_.backward_weight(s.dqkv, s.qkv);
  // Note [key bias] in attention.cpp; this rank's key columns are the middle of its three blocks.
  if (!init_.qkv.bias || init_.rope > 0.0f) return;
  float* dbias = qkv_.parameters("").at(1).grad->data();
  const std::size_t d = dim_ / heads_, w = d * local_heads_;
  std::fill(dbias + w, dbias + w + d * local_kv_heads_, 0.0f);
}

std::vector<parameter> head_parallel_attention::parameters(const std::string& prefix) {
  std::vector<parameter> all = qkv_.parameters(prefix + "qkv.");
  for (parameter& p : proj_.parameters(prefix + "proj.")) all.push_back(p);
  return all;
}

}  // namespace ap

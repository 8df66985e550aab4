#include "model/attention.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "random/seeded_random.hpp"
#include "tensor/batched_matmul.hpp"
#include "tensor/compute.hpp"
#include "tensor/fast_exp.hpp"

namespace ap {

namespace {

// dim, once checked: before the projections are built, so the error names the heads.
std::size_t checked_dim(std::size_t dim, std::size_t heads) {
  if (dim == 0 || heads == 0 || dim % heads != 0)
    throw std::invalid_argument("Attention needs heads dividing dim, got dim " + std::to_string(dim) + " and " +
                                std::to_string(heads) + " heads");
  return dim;
}

}  // namespace

attention_init parse_attention_init(const layer_spec& s) {
  attention_init init;
  init.qkv = parse_init_options(s, "std");
  init.proj = parse_init_options(s, "proj_std");
  return init;
}

std::string attention_init_text(const attention_init& init) {
  return init_options_text({init.qkv.std, true}) + init_options_text({init.proj.std, true}, "proj_std") +
         (init.qkv.bias ? "" : ":bias=0");
}

causal_self_attention::causal_self_attention(std::size_t dim, std::size_t heads, attention_init init)
    : dim_(checked_dim(dim, heads)), heads_(heads), init_(init), qkv_(dim, 3 * dim, init.qkv),
      proj_(dim, dim, init.proj) {}

std::string causal_self_attention::describe() const {
  return "Attention(" + std::to_string(dim_) + ", " + std::to_string(heads_) + " heads)";
}

std::string causal_self_attention::spec() const {
  return "attention:" + std::to_string(dim_) + ":" + std::to_string(heads_) + attention_init_text(init_);
}

namespace {

// Note [parallel element loops] in compute.hpp: rows are independent, so any thread count gives the same bits.
constexpr std::ptrdiff_t parallel_rows = 64;

// Head h of part `which` (0 q, 1 k, 2 v) of a (B, T, width) tensor is its columns which*D + h*d ... + d - 1.
// Why the heads are copied out rather than read in place by a strided 4-D matmul: oneDNN 2.6 runs the strided
// form on gemm:jit, 8.5-10 ms for the scores of B=16, H=8, T=128, d=32 on one thread, against 6.9 ms for
// brg:avx512_core on dense copies; the copies cost about 0.35 ms each (1.7% of a training step in all).
// split_heads copies part `which` of qkv (B, T, width) out into (B*H, T, d) ...
void split_heads(const float* qkv, std::size_t width, std::size_t which, std::size_t batch, std::size_t t,
                 std::size_t heads, std::size_t d, float* out) {
  const std::size_t dim = heads * d;
  const auto bh_count = static_cast<std::ptrdiff_t>(batch * heads);
#pragma omp parallel for schedule(static) if (bh_count >= parallel_rows)
  for (std::ptrdiff_t bh = 0; bh < bh_count; ++bh) {
    const std::size_t b = std::size_t(bh) / heads, h = std::size_t(bh) % heads;
    for (std::size_t i = 0; i < t; ++i) {
      const float* from = qkv + (b * t + i) * width + which * dim + h * d;
      float* to = out + (std::size_t(bh) * t + i) * d;
      for (std::size_t j = 0; j < d; ++j) to[j] = from[j];
    }
  }
}

// ... and merge_heads copies (B*H, T, d) back into part `which` of out (B, T, width).
void merge_heads(const float* heads_data, std::size_t batch, std::size_t t, std::size_t heads, std::size_t d,
                 std::size_t width, std::size_t which, float* out) {
  const std::size_t dim = heads * d;
  const auto bt_count = static_cast<std::ptrdiff_t>(batch * t);
#pragma omp parallel for schedule(static) if (bt_count >= parallel_rows)
  for (std::ptrdiff_t bt = 0; bt < bt_count; ++bt) {
    const std::size_t b = std::size_t(bt) / t, i = std::size_t(bt) % t;
    for (std::size_t h = 0; h < heads; ++h) {
      const float* from = heads_data + ((b * heads + h) * t + i) * d;
      float* to = out + std::size_t(bt) * width + which * dim + h * d;
      for (std::size_t j = 0; j < d; ++j) to[j] = from[j];
    }
  }
}

// The three parts of qkv (B, T, 3 W) split out at once, q, k and v each (B*H, T, d): one team, not three.
void split_qkv_heads(const float* qkv, std::size_t batch, std::size_t t, std::size_t heads, std::size_t d, float* q,
                     float* k, float* v) {
  const std::size_t dim = heads * d, width = 3 * dim;
  float* const outs[3] = {q, k, v};
  const auto bh_count = static_cast<std::ptrdiff_t>(batch * heads);
#pragma omp parallel for schedule(static) if (bh_count >= parallel_rows)
  for (std::ptrdiff_t bh = 0; bh < bh_count; ++bh) {
    const std::size_t b = std::size_t(bh) / heads, h = std::size_t(bh) % heads;
    for (std::size_t which = 0; which < 3; ++which)
      for (std::size_t i = 0; i < t; ++i) {
        const float* from = qkv + (b * t + i) * width + which * dim + h * d;
        float* to = outs[which] + (std::size_t(bh) * t + i) * d;
        for (std::size_t j = 0; j < d; ++j) to[j] = from[j];
      }
  }
}

// dq, dk, dv (B*H, T, d) merged into dqkv (B, T, 3 W) at once: one team, and each row of dqkv written whole.
void merge_qkv_heads(const float* dq, const float* dk, const float* dv, std::size_t batch, std::size_t t,
                     std::size_t heads, std::size_t d, float* dqkv) {
  const std::size_t dim = heads * d, width = 3 * dim;
  const float* const ins[3] = {dq, dk, dv};
  const auto bt_count = static_cast<std::ptrdiff_t>(batch * t);
#pragma omp parallel for schedule(static) if (bt_count >= parallel_rows)
  for (std::ptrdiff_t bt = 0; bt < bt_count; ++bt) {
    const std::size_t b = std::size_t(bt) / t, i = std::size_t(bt) % t;
    for (std::size_t which = 0; which < 3; ++which)
      for (std::size_t h = 0; h < heads; ++h) {
        const float* from = ins[which] + ((b * heads + h) * t + i) * d;
        float* to = dqkv + std::size_t(bt) * width + which * dim + h * d;
        for (std::size_t j = 0; j < d; ++j) to[j] = from[j];
      }
  }
}

}  // namespace

namespace {

// Note [compute dtype]: `value` held in `type`: moved when it is float32 already, else converted (rounded).
void keep_as(tensor& held, tensor& value, dtype type) {
  if (type == value.type())
    held = std::move(value);
  else
    stash_as(held, value, type);
}

// `x` in `type`: itself, or converted into `scratch`.
const tensor& in_type(const tensor& x, dtype type, tensor& scratch) {
  if (x.type() == type) return x;
  assign_as(scratch, x, type);
  return scratch;
}

// Note [attention in groups]: how many heads of t x t float32 scores fit in 256 KB of a core's cache (at least 1).
std::size_t heads_per_group(std::size_t t) {
  return std::max<std::size_t>(1, (std::size_t(256) << 10) / (t * t * sizeof(float)));
}

// batched_gemm (beta 0) of two tensors of one dtype: bfloat16 inputs with fp32 sums, or float32.
void product(bool transpose_a, bool transpose_b, std::size_t batch, std::size_t m, std::size_t n, std::size_t k,
             float alpha, const tensor& a, const tensor& b, float* c) {
  if (a.type() == dtype::bfloat16)
    batched_gemm(transpose_a, transpose_b, batch, m, n, k, alpha, a.bf16_data(), b.bf16_data(), 0.0f, c);
  else
    batched_gemm(transpose_a, transpose_b, batch, m, n, k, alpha, a.data(), b.data(), 0.0f, c);
}

}  // namespace

void causal_softmax_rows(float* scores, std::size_t rows, std::size_t t) {
  const auto n = static_cast<std::ptrdiff_t>(rows);
#pragma omp parallel for schedule(static) if (n >= parallel_rows * 8)
  for (std::ptrdiff_t r = 0; r < n; ++r) {
    float* row = scores + std::size_t(r) * t;
    const std::size_t seen = std::size_t(r) % t + 1;  // columns 0 .. r % t
    const float max = row_max(row, seen);
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (std::size_t j = 0; j < seen; ++j) {
      row[j] = exp_nonpositive(row[j] - max);
      sum += row[j];
    }
    const float inv = 1.0f / sum;
    for (std::size_t j = 0; j < seen; ++j) row[j] *= inv;
    for (std::size_t j = seen; j < t; ++j) row[j] = 0.0f;
  }
}

namespace {

// Rows of the softmax's backward, in place: g = p * (g - rowsum(g * p)) * scale over the positions each row sees
// (row r sees r % t + 1), 0 beyond.
void causal_softmax_backward_rows(const float* p, float* g, std::size_t rows, std::size_t t, float scale) {
  const auto n = static_cast<std::ptrdiff_t>(rows);
#pragma omp parallel for schedule(static) if (n >= parallel_rows * 8)
  for (std::ptrdiff_t r = 0; r < n; ++r) {
    const float* pr = p + std::size_t(r) * t;
    float* gr = g + std::size_t(r) * t;
    const std::size_t seen = std::size_t(r) % t + 1;
    float dot = 0.0f;
#pragma omp simd reduction(+ : dot)  // Note [vector sums] in tensor/compute.hpp
    for (std::size_t j = 0; j < seen; ++j) dot += gr[j] * pr[j];
    for (std::size_t j = 0; j < seen; ++j) gr[j] = pr[j] * (gr[j] - dot) * scale;
    for (std::size_t j = seen; j < t; ++j) gr[j] = 0.0f;
  }
}

}  // namespace

tensor attention_heads_forward(const tensor& qkv, std::size_t heads, dtype type, attention_heads& s) {
  const std::size_t batch = qkv.shape()[0], t = qkv.shape()[1], width = qkv.shape()[2] / 3, d = width / heads;
  const std::size_t bh = batch * heads;
  tensor q = tensor::from_shape({bh, t, d}), k = tensor::from_shape({bh, t, d}), v = tensor::from_shape({bh, t, d});
  split_qkv_heads(qkv.data(), batch, t, heads, d, q.data(), k.data(), v.data());
  keep_as(s.q, q, type), keep_as(s.k, k, type), keep_as(s.v, v, type);
  tensor probs = tensor::from_shape({bh, t, t});
  const float scale = 1.0f / std::sqrt(float(d));
  tensor heads_out = tensor::from_shape({bh, t, d});  // (B*H, T, d)
  if (type == dtype::float32) {
    // Note [attention in groups]: the scores of all B x H heads (33.5 MB for the GPT's 64 x 8 heads of 128 x
    // 128) were written by one batched product, read and written again by the softmax and read by the second
    // product: three passes through memory; the backward's dP and dS five more. Now each thread takes groups of
    // heads whose scores fit in 256 KB of its cache (4 such heads) and runs the products (batched_gemm on one
    // thread, inside the team) and the softmax on a group while its scores are still there: the probabilities
    // go to memory once, as the stash, and dP / dS never. The groups are fixed by the shape alone, so any thread
    // count gives the same bits. bench_ops, 2-core machine, the binaries alternating twice (ms, 1 / 2 threads):
    // attention_heads.forward 30.2 / 14.7 and 30.6 / 15.1 -> 27.7 / 13.5 and 27.5 / 13.6; backward 37.8 / 17.9
    // and 39.2 / 19.1 -> 30.1 / 14.9 and 30.8 / 15.1. A bfloat16 layer keeps the whole-batch passes (its stash
    // is the rounded probabilities, which the second product reads).
    const std::size_t group = heads_per_group(t);
    const auto groups = static_cast<std::ptrdiff_t>((bh + group - 1) / group);
    const float *q = s.q.data(), *k = s.k.data(), *v = s.v.data();  // data() once, outside the team
    float *all_p = probs.data(), *out = heads_out.data();
#pragma omp parallel for schedule(static) if (groups > 1)
    for (std::ptrdiff_t g = 0; g < groups; ++g) {
      const std::size_t first = std::size_t(g) * group, n = std::min(group, bh - first), at = first * t * d;
      float* p = all_p + first * t * t;
      batched_gemm(false, true, n, t, t, d, scale, q + at, k + at, 0.0f, p);  // scores
      causal_softmax_rows(p, n * t, t);
      batched_gemm(false, false, n, t, d, t, 1.0f, p, v + at, 0.0f, out + at);
    }
    keep_as(s.probs, probs, type);
  } else {
    product(false, true, bh, t, t, d, scale, s.q, s.k, probs.data());  // scores
    causal_softmax_rows(probs.data(), bh * t, t);
    keep_as(s.probs, probs, type);
    product(false, false, bh, t, d, t, 1.0f, s.probs, s.v, heads_out.data());
  }
  tensor merged = tensor::from_shape({batch, t, width});  // (B, T, W)
  merge_heads(heads_out.data(), batch, t, heads, d, width, 0, merged.data());
  return merged;
}

void attention_heads_backward(const tensor& dmerged, std::size_t heads, const attention_heads& s, tensor& dqkv) {
  const std::size_t bh = s.q.shape()[0], t = s.q.shape()[1], d = s.q.shape()[2], batch = bh / heads;
  const std::size_t width = heads * d;
  // Note [compute dtype]: the products take q, k, v, probs as held (bfloat16 in a bfloat16 layer) and dO, dS
  // in the same dtype; the softmax backward runs in float32.
  const dtype type = s.q.type();
  tensor dheads = tensor::from_shape({bh, t, d});  // (B*H, T, d)
  split_heads(dmerged.data(), width, 0, batch, t, heads, d, dheads.data());
  tensor scratch;
  const tensor& dheads_typed = in_type(dheads, type, scratch);
  // dP = dO v^T; dv = P^T dO; dS = P * (dP - rowsum(dP * P)) / sqrt(d); dq = dS k; dk = dS^T q.
  tensor dv = tensor::from_shape({bh, t, d}), dq = tensor::from_shape({bh, t, d}), dk = tensor::from_shape({bh, t, d});
  const float scale = 1.0f / std::sqrt(float(d));
  if (type == dtype::float32) {
    // Note [attention in groups]: dP and dS of a group stay in the thread's cache and never reach memory.
    const std::size_t group = heads_per_group(t);
    const auto groups = static_cast<std::ptrdiff_t>((bh + group - 1) / group);
    const float *q = s.q.data(), *k = s.k.data(), *v = s.v.data(), *all_p = s.probs.data(), *dout = dheads.data();
    float *all_dq = dq.data(), *all_dk = dk.data(), *all_dv = dv.data();
#pragma omp parallel for schedule(static) if (groups > 1)
    for (std::ptrdiff_t g = 0; g < groups; ++g) {
      const std::size_t first = std::size_t(g) * group, n = std::min(group, bh - first), at = first * t * d;
      const float* p = all_p + first * t * t;
      thread_local std::vector<float> dp_group;
      dp_group.resize(n * t * t);
      float* dp = dp_group.data();
      batched_gemm(false, true, n, t, t, d, 1.0f, dout + at, v + at, 0.0f, dp);
      batched_gemm(true, false, n, t, d, t, 1.0f, p, dout + at, 0.0f, all_dv + at);
      causal_softmax_backward_rows(p, dp, n * t, t, scale);  // dP becomes dS
      batched_gemm(false, false, n, t, d, t, 1.0f, dp, k + at, 0.0f, all_dq + at);
      batched_gemm(true, false, n, t, d, t, 1.0f, dp, q + at, 0.0f, all_dk + at);
    }
  } else {
    tensor dp = tensor::from_shape({bh, t, t});  // (B*H, T, T)
    product(false, true, bh, t, t, d, 1.0f, dheads_typed, s.v, dp.data());
    product(true, false, bh, t, d, t, 1.0f, s.probs, dheads_typed, dv.data());
    {
      tensor p32;
      causal_softmax_backward_rows(float32_view(s.probs, p32).data(), dp.data(), bh * t, t, scale);
    }
    tensor ds_scratch;
    const tensor& ds = in_type(dp, type, ds_scratch);  // dS, the input of the two products below
    product(false, false, bh, t, d, t, 1.0f, ds, s.k, dq.data());
    product(true, false, bh, t, d, t, 1.0f, ds, s.q, dk.data());
  }
  if (shape_of(dqkv) != shape_t{batch, t, 3 * width}) dqkv = tensor::from_shape({batch, t, 3 * width});
  merge_qkv_heads(dq.data(), dk.data(), dv.data(), batch, t, heads, d, dqkv.data());
}

causal_self_attention::saved& causal_self_attention::start_forward(const tensor& x, layer_cache& cache) const {
  if (x.dimension() != 3 || x.shape()[2] != dim_)
    throw std::invalid_argument(describe() + " takes (batch, sequence, " + std::to_string(dim_) +
                                "), got input of shape " + shape_string(x));
  saved& s = cache.emplace<saved>();
  s.input_done = false;
  return s;
}

tensor causal_self_attention::heads_and_projection(const tensor& qkv, saved& s, const forward_context& ctx) const {
  tensor merged = attention_heads_forward(qkv, heads_, compute_dtype(), s.heads);  // (B, T, D)
  return proj_.forward_owned(std::move(merged), s.proj, ctx);  // Note [owned input]
}

tensor causal_self_attention::forward(const tensor& x, layer_cache& cache, const forward_context& ctx) const {
  saved& s = start_forward(x, cache);
  return heads_and_projection(qkv_.forward(x, s.qkv, ctx), s, ctx);  // qkv: (B, T, 3D)
}

tensor causal_self_attention::forward_owned(tensor&& x, layer_cache& cache, const forward_context& ctx) const {
  saved& s = start_forward(x, cache);
  return heads_and_projection(qkv_.forward_owned(std::move(x), s.qkv, ctx), s, ctx);
}

void causal_self_attention::set_compute_dtype(dtype type) {
  layer::set_compute_dtype(type);
  qkv_.set_compute_dtype(type);
  proj_.set_compute_dtype(type);
}

void causal_self_attention::backward_input(const tensor& dy, layer_cache& cache, tensor* dx) const {
  saved& s = cache.get<saved>(*this);
  const std::size_t batch = s.heads.q.shape()[0] / heads_, t = s.heads.q.shape()[1];
  check_dy_shape(dy, {batch, t, dim_}, *this);
  tensor dmerged;  // (B, T, D)
  proj_.backward_input(dy, s.proj, &dmerged);
  attention_heads_backward(dmerged, heads_, s.heads, s.dqkv);
  qkv_.backward_input(s.dqkv, s.qkv, dx);
  s.input_done = true;
}

void causal_self_attention::backward_weight(const tensor& dy, layer_cache& cache) {
  saved& s = cache.get<saved>(*this);
  if (!s.input_done)
    throw std::invalid_argument(describe() + " backward_weight: run backward_input first (it computes the QKV dy)");
  proj_.backward_weight(dy, s.proj);
  qkv_.backward_weight(s.dqkv, s.qkv);
  // Note [key bias]: adding b_k to every key adds q . b_k to every score of a row, which the softmax ignores:
  // the key bias's gradient is exactly 0, and what the sum over positions leaves is rounding noise (1e-9) that
  // Adam would scale into lr-sized steps in a random direction, different for every microbatch split. So
  // it is set to the exact 0 it is (each backward_weight adds 0, so the accumulated value is 0 too).
  if (!init_.qkv.bias) return;
  float* dbias = qkv_.parameters("").at(1).grad->data();
  std::fill(dbias + dim_, dbias + 2 * dim_, 0.0f);
}

std::vector<parameter> causal_self_attention::parameters(const std::string& prefix) {
  std::vector<parameter> all = qkv_.parameters(prefix + "qkv.");
  for (parameter& p : proj_.parameters(prefix + "proj.")) all.push_back(p);
  return all;
}

void causal_self_attention::initialize(std::uint64_t seed) {
  qkv_.initialize(hash_counters(seed, 0));
  proj_.initialize(hash_counters(seed, 1));
}

}  // namespace ap

#include "model/attention.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "model/spec_text.hpp"
#include "random/seeded_random.hpp"
#include "tensor/batched_matmul.hpp"
#include "tensor/compute.hpp"
#include "tensor/fast_exp.hpp"

namespace ap {

namespace {

// dim, once checked: before the projections are built, so the error names the heads.
std::size_t checked_dim(std::size_t dim, std::size_t heads, const attention_init& init) {
  check_attention_shape("Attention", dim, heads, init);
  return dim;
}

// kv_heads 0 when it equals the heads: one text for one layer.
attention_init normalized(attention_init init, std::size_t heads) {
  if (init.kv_heads == heads) init.kv_heads = 0;
  return init;
}

}  // namespace

void check_attention_shape(const std::string& who, std::size_t dim, std::size_t heads, const attention_init& init) {
  if (dim == 0 || heads == 0 || dim % heads != 0)
    throw std::invalid_argument(who + " needs heads dividing dim, got dim " + std::to_string(dim) + " and " +
                                std::to_string(heads) + " heads");
  if (init.kv_heads != 0 && heads % init.kv_heads != 0)
    throw std::invalid_argument(who + " needs kv heads dividing the heads, got " + std::to_string(heads) +
                                " heads and " + std::to_string(init.kv_heads) + " kv heads");
  if (!(init.rope >= 0.0f) || !std::isfinite(init.rope))
    throw std::invalid_argument(who + "'s rotary base must be a positive number, got " + format_float(init.rope));
  if (init.rope > 0.0f && (dim / heads) % 2 != 0)
    throw std::invalid_argument(who + " with rotary positions needs an even head width, got dim " +
                                std::to_string(dim) + " / " + std::to_string(heads) + " heads = " +
                                std::to_string(dim / heads));
}

const std::vector<std::string>& attention_option_keys() {
  static const std::vector<std::string> keys{"std", "proj_std", "bias", "kv_heads", "rope"};
  return keys;
}

attention_init parse_attention_init(const layer_spec& s) {
  attention_init init;
  init.qkv = parse_init_options(s, "std");
  init.proj = parse_init_options(s, "proj_std");
  const auto bad = [&](const std::string& why) { return std::invalid_argument("bad layer spec '" + s.text + "': " + why); };
  const std::size_t dim = s.width(0), heads = s.width(1);
  if (const auto v = s.option("kv_heads")) {
    init.kv_heads = parse_width(*v, s.text);
    if (heads % init.kv_heads != 0)
      throw bad("option 'kv_heads' (" + *v + ") must divide the heads (" + s.fields[1] + ")");
  }
  if (const auto v = s.option("rope")) {
    init.rope = parse_float(*v, s.text);
    if (!(init.rope > 0.0f)) throw bad("option 'rope' must be a positive number (the rotary base), got '" + *v + "'");
    if (heads != 0 && dim % heads == 0 && (dim / heads) % 2 != 0)
      throw bad("option 'rope' needs an even head width, got dim " + s.fields[0] + " / " + s.fields[1] +
                " heads = " + std::to_string(dim / heads));
  }
  return init;
}

std::string rope_base_text(float base) {
  // A whole base as digits ("10000", not format_float's "1e+04"); any other as format_float writes it.
  if (base == std::floor(base) && base < 1e9f) return std::to_string(static_cast<std::uint64_t>(base));
  return format_float(base);
}

std::string attention_init_text(const attention_init& init) {
  return init_options_text({init.qkv.std, true}) + init_options_text({init.proj.std, true}, "proj_std") +
         (init.qkv.bias ? "" : ":bias=0") + (init.kv_heads ? ":kv_heads=" + std::to_string(init.kv_heads) : "") +
         (init.rope > 0.0f ? ":rope=" + rope_base_text(init.rope) : "");
}

causal_self_attention::causal_self_attention(std::size_t dim, std::size_t heads, attention_init init)
    : dim_(checked_dim(dim, heads, init)), heads_(heads), init_(normalized(init, heads)),
      qkv_(dim, dim + 2 * (init.kv_heads ? init.kv_heads : heads) * (dim / heads), init.qkv),
      proj_(dim, dim, init.proj) {}

head_layout causal_self_attention::layout() const {
  return {heads_, init_.kv_heads ? init_.kv_heads : heads_, init_.rope};
}

std::string causal_self_attention::describe() const {
  return "Attention(" + std::to_string(dim_) + ", " + std::to_string(heads_) + " heads" +
         (init_.kv_heads ? ", " + std::to_string(init_.kv_heads) + " kv heads" : "") + (init_.rope > 0.0f ? ", rope" : "") +
         ")";
}

std::string causal_self_attention::spec() const {
  return "attention:" + std::to_string(dim_) + ":" + std::to_string(heads_) + attention_init_text(init_);
}

double causal_self_attention::flops_per_row() const {
  const double d = double(dim_), kv = double(layout().kv_heads) * double(dim_ / heads_);
  return 2.0 * d * (d + 2.0 * kv) + 2.0 * d * d;
}

namespace {

// Note [parallel element loops] in compute.hpp.
constexpr std::ptrdiff_t parallel_rows = 64;

// Head h of part `which` (0 q, 1 k, 2 v) of a (B, T, width) tensor is its columns which*D + h*d ... + d - 1.
// Copied out because oneDNN's strided 4-D matmul is slower than dense copies. split_heads: (B, T, width)
// into (B*H, T, d) ...
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

// The three parts of qkv split out at once, q (B*H, T, d), k and v (B*K, T, d): one team, not three.
void split_qkv_heads(const float* qkv, std::size_t batch, std::size_t t, std::size_t heads, std::size_t kv,
                     std::size_t d, float* q, float* k, float* v) {
  const std::size_t width = (heads + 2 * kv) * d;
  const auto bh_count = static_cast<std::ptrdiff_t>(batch * heads);
#pragma omp parallel for schedule(static) if (bh_count >= parallel_rows)
  for (std::ptrdiff_t bh = 0; bh < bh_count; ++bh) {
    const std::size_t b = std::size_t(bh) / heads, h = std::size_t(bh) % heads;
    // q of head h; k and v of kv head h, for h < K
    const std::size_t parts = h < kv ? 3 : 1;
    for (std::size_t which = 0; which < parts; ++which) {
      const std::size_t column = which == 0 ? h * d : (heads + (which - 1) * kv + h) * d;
      float* const out = which == 0 ? q + std::size_t(bh) * t * d : (which == 1 ? k : v) + (b * kv + h) * t * d;
      for (std::size_t i = 0; i < t; ++i) {
        const float* from = qkv + (b * t + i) * width + column;
        float* to = out + i * d;
        for (std::size_t j = 0; j < d; ++j) to[j] = from[j];
      }
    }
  }
}

// dq (B*H, T, d), dk and dv (B*K, T, d) merged into dqkv (B, T, (H + 2K) d) at once, each row written whole.
void merge_qkv_heads(const float* dq, const float* dk, const float* dv, std::size_t batch, std::size_t t,
                     std::size_t heads, std::size_t kv, std::size_t d, float* dqkv) {
  const std::size_t width = (heads + 2 * kv) * d;
  const auto bt_count = static_cast<std::ptrdiff_t>(batch * t);
#pragma omp parallel for schedule(static) if (bt_count >= parallel_rows)
  for (std::ptrdiff_t bt = 0; bt < bt_count; ++bt) {
    const std::size_t b = std::size_t(bt) / t, i = std::size_t(bt) % t;
    float* row = dqkv + std::size_t(bt) * width;
    for (std::size_t h = 0; h < heads + 2 * kv; ++h) {  // the row's heads of q, then k, then v
      const float* from = h < heads        ? dq + ((b * heads + h) * t + i) * d
                          : h < heads + kv ? dk + ((b * kv + h - heads) * t + i) * d
                                           : dv + ((b * kv + h - heads - kv) * t + i) * d;
      for (std::size_t j = 0; j < d; ++j) row[h * d + j] = from[j];
    }
  }
}

// Cos and sin of p base^(-2i/d) for positions p < t and pairs i < d/2, (t, d/2) each.
struct rotary_angles {
  std::vector<float> cos, sin;
};

rotary_angles rotary_angles_of(std::size_t t, std::size_t d, float base) {
  const std::size_t half = d / 2;
  rotary_angles a;
  a.cos.resize(t * half), a.sin.resize(t * half);
  for (std::size_t i = 0; i < half; ++i) {
    const double frequency = std::pow(double(base), -2.0 * double(i) / double(d));
    for (std::size_t p = 0; p < t; ++p) {
      const double angle = double(p) * frequency;
      a.cos[p * half + i] = float(std::cos(angle));
      a.sin[p * half + i] = float(std::sin(angle));
    }
  }
  return a;
}

// Rotates the pairs (i, i + d/2) of every row of x (rows, d), row r at position r % t, in place; `inverse`
// for the backward.
void rotate_pairs(float* x, std::size_t rows, std::size_t t, std::size_t d, const rotary_angles& a, bool inverse) {
  const std::size_t half = d / 2;
  const float sign = inverse ? -1.0f : 1.0f;
  const float *cos = a.cos.data(), *sin = a.sin.data();
  const auto n = static_cast<std::ptrdiff_t>(rows);
#pragma omp parallel for schedule(static) if (n >= parallel_rows * 8)
  for (std::ptrdiff_t r = 0; r < n; ++r) {
    float* row = x + std::size_t(r) * d;
    const float* c = cos + (std::size_t(r) % t) * half;
    const float* s = sin + (std::size_t(r) % t) * half;
    for (std::size_t i = 0; i < half; ++i) {
      const float first = row[i], second = row[i + half], si = sign * s[i];
      row[i] = first * c[i] - second * si;
      row[i + half] = second * c[i] + first * si;
    }
  }
}

}  // namespace

namespace {

// `value` held in `type`: moved when float32, else rounded.
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

// How many heads of t x t float32 scores fit in 256 KB of cache, at least 1 (Note [attention in groups]).
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

namespace {

// Groups of heads on the rank's threads; a lone group on the calling thread, outside any parallel region, so
// its products use the rank's team (Note [one level of teams] in tensor/compute.cpp).
template <class F>
void in_groups(std::ptrdiff_t groups, const F& run_group) {
  if (groups == 1) return run_group(0);
#pragma omp parallel for schedule(static)
  for (std::ptrdiff_t i = 0; i < groups; ++i) run_group(i);
}

}  // namespace

tensor attention_heads_forward(const tensor& qkv, const head_layout& layout, dtype type, attention_heads& s) {
  const std::size_t heads = layout.heads, kv = layout.kv_heads, g = heads / kv;  // Note [grouped-query attention]
  const std::size_t batch = qkv.shape()[0], t = qkv.shape()[1], d = qkv.shape()[2] / (heads + 2 * kv);
  const std::size_t width = heads * d, bh = batch * heads, units = batch * kv;  // units: the groups of heads
  tensor q = tensor::from_shape({bh, t, d}), k = tensor::from_shape({units, t, d}), v = tensor::from_shape({units, t, d});
  split_qkv_heads(qkv.data(), batch, t, heads, kv, d, q.data(), k.data(), v.data());
  if (layout.rope_base > 0.0f) {  // Note [rotary positions]
    const rotary_angles angles = rotary_angles_of(t, d, layout.rope_base);
    rotate_pairs(q.data(), bh * t, t, d, angles, false);
    rotate_pairs(k.data(), units * t, t, d, angles, false);
  }
  keep_as(s.q, q, type), keep_as(s.k, k, type), keep_as(s.v, v, type);
  tensor probs = tensor::from_shape({bh, t, t});
  const float scale = 1.0f / std::sqrt(float(d));
  tensor heads_out = tensor::from_shape({bh, t, d});  // (B*H, T, d)
  if (type == dtype::float32) {
    // Note [attention in groups]: each thread takes groups of heads whose scores fit in 256 KB of cache and
    // runs both products and the softmax while they are there: the probabilities reach memory once, as the
    // stash, and dP / dS never, instead of several passes over all heads' scores. Groups depend on the shape
    // only, so any thread count gives the same bits. A bfloat16 layer keeps whole-batch passes.
    // Groups of whole units (a k/v head and its g query heads).
    const std::size_t group = std::max<std::size_t>(1, heads_per_group(t) / g);
    const auto groups = static_cast<std::ptrdiff_t>((units + group - 1) / group);
    const float *q = s.q.data(), *k = s.k.data(), *v = s.v.data();  // data() once, outside the team
    float *all_p = probs.data(), *out = heads_out.data();
    const auto run_group = [&](std::ptrdiff_t i) {
      const std::size_t first = std::size_t(i) * group, n = std::min(group, units - first);
      const std::size_t at = first * g * t * d, kv_at = first * t * d;
      float* p = all_p + first * g * t * t;
      batched_gemm(false, true, n, g * t, t, d, scale, q + at, k + kv_at, 0.0f, p);  // scores
      causal_softmax_rows(p, n * g * t, t);
      batched_gemm(false, false, n, g * t, d, t, 1.0f, p, v + kv_at, 0.0f, out + at);
    };
    in_groups(groups, run_group);
    keep_as(s.probs, probs, type);
  } else {
    product(false, true, units, g * t, t, d, scale, s.q, s.k, probs.data());  // scores
    causal_softmax_rows(probs.data(), bh * t, t);
    keep_as(s.probs, probs, type);
    product(false, false, units, g * t, d, t, 1.0f, s.probs, s.v, heads_out.data());
  }
  tensor merged = tensor::from_shape({batch, t, width});  // (B, T, W)
  merge_heads(heads_out.data(), batch, t, heads, d, width, 0, merged.data());
  return merged;
}

void attention_heads_backward(const tensor& dmerged, const head_layout& layout, const attention_heads& s, tensor& dqkv) {
  const std::size_t heads = layout.heads, kv = layout.kv_heads, g = heads / kv;  // Note [grouped-query attention]
  const std::size_t bh = s.q.shape()[0], t = s.q.shape()[1], d = s.q.shape()[2], batch = bh / heads;
  const std::size_t width = heads * d, units = batch * kv;
  // The products take q, k, v, probs, dO and dS in the held dtype; the softmax backward runs in float32.
  const dtype type = s.q.type();
  tensor dheads = tensor::from_shape({bh, t, d});  // (B*H, T, d)
  split_heads(dmerged.data(), width, 0, batch, t, heads, d, dheads.data());
  tensor scratch;
  const tensor& dheads_typed = in_type(dheads, type, scratch);
  // dP = dO v^T; dv = P^T dO; dS = P * (dP - rowsum(dP * P)) / sqrt(d); dq = dS k; dk = dS^T q.
  tensor dq = tensor::from_shape({bh, t, d}), dk = tensor::from_shape({units, t, d}), dv = tensor::from_shape({units, t, d});
  const float scale = 1.0f / std::sqrt(float(d));
  if (type == dtype::float32) {
    // dP and dS of a group stay in cache (Note [attention in groups]).
    const std::size_t group = std::max<std::size_t>(1, heads_per_group(t) / g);
    const auto groups = static_cast<std::ptrdiff_t>((units + group - 1) / group);
    const float *q = s.q.data(), *k = s.k.data(), *v = s.v.data(), *all_p = s.probs.data(), *dout = dheads.data();
    float *all_dq = dq.data(), *all_dk = dk.data(), *all_dv = dv.data();
    const auto run_group = [&](std::ptrdiff_t i) {
      const std::size_t first = std::size_t(i) * group, n = std::min(group, units - first);
      const std::size_t at = first * g * t * d, kv_at = first * t * d;
      const float* p = all_p + first * g * t * t;
      thread_local std::vector<float> dp_group;
      dp_group.resize(n * g * t * t);
      float* dp = dp_group.data();
      batched_gemm(false, true, n, g * t, t, d, 1.0f, dout + at, v + kv_at, 0.0f, dp);
      batched_gemm(true, false, n, t, d, g * t, 1.0f, p, dout + at, 0.0f, all_dv + kv_at);
      causal_softmax_backward_rows(p, dp, n * g * t, t, scale);  // dP becomes dS
      batched_gemm(false, false, n, g * t, d, t, 1.0f, dp, k + kv_at, 0.0f, all_dq + at);
      batched_gemm(true, false, n, t, d, g * t, 1.0f, dp, q + at, 0.0f, all_dk + kv_at);
    };
    in_groups(groups, run_group);
  } else {
    tensor dp = tensor::from_shape({bh, t, t});  // (B*H, T, T)
    product(false, true, units, g * t, t, d, 1.0f, dheads_typed, s.v, dp.data());
    product(true, false, units, t, d, g * t, 1.0f, s.probs, dheads_typed, dv.data());
    {
      tensor p32;
      causal_softmax_backward_rows(float32_view(s.probs, p32).data(), dp.data(), bh * t, t, scale);
    }
    tensor ds_scratch;
    const tensor& ds = in_type(dp, type, ds_scratch);  // dS, the input of the two products below
    product(false, false, units, g * t, d, t, 1.0f, ds, s.k, dq.data());
    product(true, false, units, t, d, g * t, 1.0f, ds, s.q, dk.data());
  }
  if (layout.rope_base > 0.0f) {  // the gradients of the unrotated q and k (Note [rotary positions])
    const rotary_angles angles = rotary_angles_of(t, d, layout.rope_base);
    rotate_pairs(dq.data(), bh * t, t, d, angles, true);
    rotate_pairs(dk.data(), units * t, t, d, angles, true);
  }
  const shape_t shape{batch, t, (heads + 2 * kv) * d};
  if (shape_of(dqkv) != shape) dqkv = tensor::from_shape(shape);
  merge_qkv_heads(dq.data(), dk.data(), dv.data(), batch, t, heads, kv, d, dqkv.data());
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
  tensor merged = attention_heads_forward(qkv, layout(), compute_dtype(), s.heads);  // (B, T, D)
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
  attention_heads_backward(dmerged, layout(), s.heads, s.dqkv);
  qkv_.backward_input(s.dqkv, s.qkv, dx);
  s.input_done = true;
}

void causal_self_attention::backward_weight(const tensor& dy, layer_cache& cache) {
  saved& s = cache.get<saved>(*this);
  if (!s.input_done)
    throw std::invalid_argument(describe() + " backward_weight: run backward_input first (it computes the QKV dy)");
  proj_.backward_weight(dy, s.proj);
  qkv_.backward_weight(s.dqkv, s.qkv);
  // Note [key bias]: b_k adds q . b_k to a whole row of scores, which the softmax ignores, so its gradient is
  // exactly 0; the summed value is rounding noise Adam would blow up, so it is set to 0. Not with rotary
  // positions, which rotate the bias by each key's position.
  if (!init_.qkv.bias || init_.rope > 0.0f) return;
  float* dbias = qkv_.parameters("").at(1).grad->data();
  const std::size_t kv_width = layout().kv_heads * (dim_ / heads_);
  std::fill(dbias + dim_, dbias + dim_ + kv_width, 0.0f);
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

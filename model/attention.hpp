// Causal multi-head self-attention (GPT-2's): fused QKV projection, per head causal softmax(q k^T / sqrt(d))
// in fp32, heads concatenated, output projection; (B, T, D) in and out. The projections are Linear layers;
// the products go through batched_gemm (Note [one place for attention's products] in tensor/batched_matmul.hpp).
#pragma once

#include <string>
#include <vector>

#include "model/layer.hpp"
#include "model/linear.hpp"

namespace ap {

// Note [grouped-query attention]: H query heads share K key/value heads (K divides H; K = H is multi-head):
// query heads [j H/K, (j + 1) H/K) take kv head j (LLaMA 2). A group's g = H/K query heads sit side by side in
// q, so one product takes them against their k, (g T, d) x (d, T), batched over the B K groups.

// Note [rotary positions]: RoPE in the GPT-NeoX / LLaMA (Hugging Face) convention: q's and k's pairs
// (i, i + d/2) are rotated by t base^(-2i/d) at position t, so q.k depends only on the positions' difference.
// The backward rotates dq and dk back.
struct head_layout {
  std::size_t heads = 1;     // query heads H
  std::size_t kv_heads = 1;  // key/value heads K, dividing H (Note [grouped-query attention])
  float rope_base = 0.0f;    // > 0: rotary positions of this base (Note [rotary positions]); 0: none
};

// The attention core between the projections: QKV output (B, T, (H + 2K) d) to heads' outputs (B, T, H d),
// and back; head_parallel_attention runs it on its rank's heads.
struct attention_heads {
  tensor q;        // (B*H, T, d), rotated with rope
  tensor k, v;     // (B*K, T, d) each (k rotated with rope)
  tensor probs;    // (B*H, T, T): softmax of the masked, scaled scores; exactly 0 above the diagonal
  // In bfloat16, q, k, v and probs are bfloat16; scores and softmax stay float32.
  std::size_t bytes() const { return q.byte_size() + k.byte_size() + v.byte_size() + probs.byte_size(); }
};
// The heads' outputs (B, T, H d) of `qkv` (B, T, (H + 2K) d), keeping in `s` what the backward needs.
tensor attention_heads_forward(const tensor& qkv, const head_layout& layout, dtype type, attention_heads& s);
// Writes into `dqkv` (B, T, (H + 2K) d) the gradient from `dmerged` (B, T, H d).
void attention_heads_backward(const tensor& dmerged, const head_layout& layout, const attention_heads& s, tensor& dqkv);
// Multi-head attention without rotary positions (K = H).
inline tensor attention_heads_forward(const tensor& qkv, std::size_t heads, dtype type, attention_heads& s) {
  return attention_heads_forward(qkv, head_layout{heads, heads, 0.0f}, type, s);
}
inline void attention_heads_backward(const tensor& dmerged, std::size_t heads, const attention_heads& s, tensor& dqkv) {
  attention_heads_backward(dmerged, head_layout{heads, heads, 0.0f}, s, dqkv);
}

// Options (Note [layer options]): "attention:D:H:std=S:proj_std=P:bias=0:kv_heads=K:rope=BASE".
struct attention_init {
  init_options qkv;   // std, bias
  init_options proj;  // std; bias as qkv's
  std::size_t kv_heads = 0;  // 0: as many as the heads
  float rope = 0.0f;         // the rotary base; 0: no rotary positions
};
// Refuses unknown options and bad values, naming text and key.
attention_init parse_attention_init(const layer_spec& s);
// The options' text, each when not default.
std::string attention_init_text(const attention_init& init);
// Refuses, naming `who`, heads not dividing dim, kv heads not dividing heads, a non-positive rotary base,
// or rope on an odd head width.
void check_attention_shape(const std::string& who, std::size_t dim, std::size_t heads, const attention_init& init);
// The rotary base as its option writes it: "10000", "500.5".
std::string rope_base_text(float base);
// The default rotary base; the option keys.
inline constexpr float default_rope_base = 10000.0f;
const std::vector<std::string>& attention_option_keys();

class causal_self_attention final : public layer {
 public:
  // Throws std::invalid_argument on the shapes check_attention_shape refuses.
  causal_self_attention(std::size_t dim, std::size_t heads, attention_init init = {});

  // "Attention(64, 4 heads)", "Attention(64, 4 heads, 2 kv heads, rope)"
  std::string describe() const override;
  std::optional<std::size_t> in_features() const override { return dim_; }
  std::optional<std::size_t> out_features() const override { return dim_; }

  // Shapes: B batch, T sequence, H heads, K kv heads, D dim, d = D / H.
  struct saved : saved_state {
    layer_cache qkv;    // input x (B, T, D)
    layer_cache proj;   // input: the heads' outputs (B, T, D)
    attention_heads heads;
    tensor dqkv;        // (B, T, D + 2Kd): from backward_input, for backward_weight
    bool input_done = false;
    std::size_t bytes() const override { return qkv.bytes() + proj.bytes() + heads.bytes() + dqkv.byte_size(); }
  };
  tensor forward(const tensor& x, layer_cache& cache, const forward_context& ctx) const override;
  tensor forward_owned(tensor&& x, layer_cache& cache, const forward_context& ctx) const override;
  void backward_input(const tensor& dy, layer_cache& cache, tensor* dx) const override;
  void backward_weight(const tensor& dy, layer_cache& cache) override;

  std::vector<parameter> parameters(const std::string& prefix) override;
  std::unique_ptr<layer> clone() const override { return std::make_unique<causal_self_attention>(*this); }
  std::string spec() const override;  // "attention:64:4", "attention:64:4:kv_heads=2:rope=10000"
  void initialize(std::uint64_t seed) override;  // each projection from its own seed
  void set_compute_dtype(dtype type) override;   // its own and its projections'
  // Per row: the projections' 2 (D (D + 2Kd) + D^2). The scores add 4 T D, with T unknown here.
  double flops_per_row() const override;
  std::uint64_t derived_bytes() const override { return qkv_.derived_bytes() + proj_.derived_bytes(); }

 private:
  std::size_t dim_, heads_;
  attention_init init_;  // kv_heads 0 when it equals the heads
  linear qkv_;   // D -> D + 2Kd: q, k, v side by side
  linear proj_;  // D -> D
  saved& start_forward(const tensor& x, layer_cache& cache) const;  // x checked, the cache made ready
  tensor heads_and_projection(const tensor& qkv, saved& s, const forward_context& ctx) const;
  head_layout layout() const;
};

// Softmax over each row of scores (rows, T) masked to columns <= row % T, in place; masked entries become 0.
void causal_softmax_rows(float* scores, std::size_t rows, std::size_t t);

}  // namespace ap

// Causal multi-head self-attention (GPT-2's): a fused QKV projection, per head softmax(q k^T / sqrt(head_dim))
// with a causal mask (position t sees positions <= t) in fp32, the heads' weighted values concatenated, and an
// output projection. Input and output (batch, sequence, dim).
//
// The two projections are Linear layers held inside (their forward, backward, I/W split and initialisation
// are Linear's), so a compute dtype given to Linear reaches them; the scores and weighted values go through
// batched_gemm only (Note [one place for attention's products] in tensor/batched_matmul.hpp). Parameters are
// named "qkv.weight", "qkv.bias", "proj.weight", "proj.bias" after the layer's prefix.
#pragma once

#include "model/layer.hpp"
#include "model/linear.hpp"

namespace ap {

// The attention core between the two projections, for `heads` heads of width d: from the QKV projection's
// output (B, T, 3 W), q, k and v side by side, each W = heads * d wide with head h at columns h * d of each,
// to the heads' outputs concatenated (B, T, W), and back. causal_self_attention runs it on all heads;
// head_parallel_attention (model/parallel_attention.hpp) on its rank's heads only.
struct attention_heads {
  tensor q, k, v;  // (B*H, T, d) each: the heads split out of the QKV projection
  tensor probs;    // (B*H, T, T): softmax of the masked, scaled scores; exactly 0 above the diagonal
  // Note [compute dtype]: in bfloat16, q, k, v and probs are held in bfloat16 and multiplied so (bf16
  // batched_gemm, fp32 sums); the scores, the softmax and its backward are float32.
  std::size_t bytes() const { return q.byte_size() + k.byte_size() + v.byte_size() + probs.byte_size(); }
};
// Returns the heads' outputs (B, T, W) of `qkv` (B, T, 3 W), keeping in `s` what the backward needs.
tensor attention_heads_forward(const tensor& qkv, std::size_t heads, dtype type, attention_heads& s);
// Writes into `dqkv` (reshaped to (B, T, 3 W) if needed) the gradient of the QKV output from `dmerged`
// (B, T, W), the gradient of the heads' outputs.
void attention_heads_backward(const tensor& dmerged, std::size_t heads, const attention_heads& s, tensor& dqkv);

// Attention's options (Note [layer options] in model/layer_spec.hpp): "attention:D:H:std=S:proj_std=P:bias=0" draws
// the QKV projection's weights normal(0, S) and the output projection's normal(0, P), each a Linear's default
// when not given, and gives neither projection a bias.
struct attention_init {
  init_options qkv;   // std, bias
  init_options proj;  // std; bias as qkv's
};
attention_init parse_attention_init(const layer_spec& s);  // refuses unknown options, naming the text and key
std::string attention_init_text(const attention_init& init);  // ":std=S:proj_std=P:bias=0", each when not default

class causal_self_attention final : public layer {
 public:
  // Throws std::invalid_argument when heads does not divide dim, naming both.
  causal_self_attention(std::size_t dim, std::size_t heads, attention_init init = {});

  std::string describe() const override;  // "Attention(64, 4 heads)"
  std::optional<std::size_t> in_features() const override { return dim_; }
  std::optional<std::size_t> out_features() const override { return dim_; }

  // Shapes with B = batch, T = sequence, H = heads, D = dim, d = D / H (head_dim).
  struct saved : saved_state {
    layer_cache qkv;    // the QKV projection's (its input x (B, T, D))
    layer_cache proj;   // the output projection's (its input, the heads' outputs concatenated (B, T, D))
    attention_heads heads;  // q, k, v, probs of the H heads
    tensor dqkv;        // (B, T, 3D): the QKV projection's dy, from backward_input, for backward_weight
    bool input_done = false;
    std::size_t bytes() const override { return qkv.bytes() + proj.bytes() + heads.bytes() + dqkv.byte_size(); }
  };
  tensor forward(const tensor& x, layer_cache& cache, const forward_context& ctx) const override;
  tensor forward_owned(tensor&& x, layer_cache& cache, const forward_context& ctx) const override;
  void backward_input(const tensor& dy, layer_cache& cache, tensor* dx) const override;
  void backward_weight(const tensor& dy, layer_cache& cache) override;

  std::vector<parameter> parameters(const std::string& prefix) override;
  std::unique_ptr<layer> clone() const override { return std::make_unique<causal_self_attention>(*this); }
  std::string spec() const override;  // "attention:64:4"
  void initialize(std::uint64_t seed) override;  // each projection as a Linear, from its own seed
  void set_compute_dtype(dtype type) override;   // its own and its projections' (Note [compute dtype])
  // Per row (token): the projections' 2 (3 D^2 + D^2) = 8 D^2. The scores and weighted values add 4 T D,
  // a ratio of T / (2 D) to the projections, with T the sequence length, unknown here.
  double flops_per_row() const override { return 8.0 * double(dim_) * double(dim_); }
  std::uint64_t derived_bytes() const override { return qkv_.derived_bytes() + proj_.derived_bytes(); }

 private:
  std::size_t dim_, heads_;
  attention_init init_;
  linear qkv_;   // D -> 3D: q, k, v side by side, each D wide (head h at columns h*d of each)
  linear proj_;  // D -> D
  saved& start_forward(const tensor& x, layer_cache& cache) const;  // x checked, the cache made ready
  tensor heads_and_projection(const tensor& qkv, saved& s, const forward_context& ctx) const;
};

// The attention core on its own (tests, benchmarks): softmax over each row of scores (rows, T) masked to
// columns <= row % T, in place; masked entries become exactly 0.
void causal_softmax_rows(float* scores, std::size_t rows, std::size_t t);

}  // namespace ap

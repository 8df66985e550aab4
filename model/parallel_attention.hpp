// Causal self-attention with its heads split over tensor-parallel ranks (Megatron's parallel attention).
#pragma once

#include <memory>

#include "model/attention.hpp"
#include "model/parallel_linear.hpp"

namespace ap {

// Note [head-parallel attention]: heads are independent between the projections, so rank r of T takes heads
// shard r (T divides H and K): its q, k, v columns of the QKV projection (a column_parallel_linear of 3 blocks),
// the attention core on those heads, and its rows of the output projection (a row_parallel_linear). One
// all-reduce forward, one backward. Unsplit it equals "attention:DIM:HEADS", parameter names included.
class head_parallel_attention final : public layer, public tensor_parallel_layer {
 public:
  // Throws std::invalid_argument for the shapes attention refuses.
  head_parallel_attention(std::size_t dim, std::size_t heads, attention_init init = {});

  std::string describe() const override;  // "HeadParallelAttention(64, 8 heads) rank 1 of 2"
  std::optional<std::size_t> in_features() const override { return dim_; }
  std::optional<std::size_t> out_features() const override { return dim_; }

  // Shapes: h heads held, w = h * D / heads, k kv heads held, u = k * D / heads.
  struct saved : saved_state {
    layer_cache qkv;        // input x (B, T, D), whole
    layer_cache proj;       // input: this rank's heads' outputs (B, T, w)
    attention_heads heads;  // this rank's h heads
    tensor dqkv;            // (B, T, w + 2u): from backward_input, for backward_weight
    bool input_done = false;
    std::size_t bytes() const override { return qkv.bytes() + proj.bytes() + heads.bytes() + dqkv.byte_size(); }
  };
  tensor forward(const tensor& x, layer_cache& cache, const forward_context& ctx) const override;
  tensor forward_owned(tensor&& x, layer_cache& cache, const forward_context& ctx) const override;
  void backward_input(const tensor& dy, layer_cache& cache, tensor* dx) const override;
  void backward_weight(const tensor& dy, layer_cache& cache) override;
  using layer::backward;
  // Note [overlapped backward], over both projections' weight gradients.
  void backward(const tensor& dy, layer_cache& cache, tensor* dx) override;

  std::vector<parameter> parameters(const std::string& prefix) override;
  std::unique_ptr<layer> clone() const override { return std::make_unique<head_parallel_attention>(*this); }
  std::string spec() const override;  // "head_parallel_attention:64:8"
  void initialize(std::uint64_t seed) override;  // as causal_self_attention, then this rank's slices
  void set_compute_dtype(dtype type) override;
  double flops_per_row() const override;  // global, as attention's

  // Refuses a T not dividing the heads or kv heads, naming the layer, heads, T and group.
  void join_group(std::shared_ptr<process_group> group) override;
  std::vector<sharded_value> sharded_values() const override;
  // Takes and gives this rank's rows (Note [sequence parallelism]). After join_group.
  void set_sequence_parallel(bool on) {
    qkv_.set_sequence_parallel(on);
    proj_.set_sequence_parallel(on);
  }

 private:
  saved& start_forward(const tensor& x, layer_cache& cache) const;  // checks x, a fresh cache
  tensor heads_and_projection(const tensor& qkv, saved& s, const forward_context& ctx) const;
  column_parallel_linear::pending_dx start_backward_input(const tensor& dy, layer_cache& cache, tensor* dx) const;

  std::size_t dim_, heads_, kv_heads_;
  std::size_t local_heads_, local_kv_heads_;  // heads_ / T, kv_heads_ / T
  attention_init init_;                       // kv_heads 0 when it equals the heads
  std::shared_ptr<process_group> group_;  // null: not split
  column_parallel_linear qkv_;  // D -> D + 2Kd in 3 blocks (q, k, v)
  row_parallel_linear proj_;    // D -> D; bias whole
};

}  // namespace ap

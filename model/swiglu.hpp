// The SwiGLU MLP (LLaMA's feed-forward): y = W_down (silu(x W_gate) * (x W_up)), spec "swiglu_mlp:D:H". Gate
// and up are one fused Linear D -> 2H (gate's columns, then up's), so x is stashed once.
#pragma once

#include <string>

#include "model/layer.hpp"
#include "model/layer_spec.hpp"
#include "model/linear.hpp"

namespace ap {

// The element-wise core: a (rows, 2w), gate then up, to h = silu(gate) * up (rows, w); and a, dh to da (rows, 2w).
void swiglu_forward(const float* a, std::size_t rows, std::size_t w, float* h);
void swiglu_backward(const float* a, const float* dh, std::size_t rows, std::size_t w, float* da);

// Options (Note [layer options]): "swiglu_mlp:D:H:std=S:down_std=P:bias=0".
struct swiglu_init {
  init_options gate_up;  // std, bias
  init_options down;     // std; bias as gate_up's
};
swiglu_init parse_swiglu_init(const layer_spec& s);     // errors name the text and key
std::string swiglu_init_text(const swiglu_init& init);

class swiglu_mlp final : public layer {
 public:
  swiglu_mlp(std::size_t dim, std::size_t hidden, swiglu_init init = {});

  std::string describe() const override;  // "SwiGLU(64->176->64)"
  std::optional<std::size_t> in_features() const override { return dim_; }
  std::optional<std::size_t> out_features() const override { return dim_; }

  // Shapes: rows = batch x sequence, H = hidden.
  struct saved : saved_state {
    layer_cache gate_up;  // input x (rows, D)
    tensor a;             // (rows, 2H): gate then up; bfloat16 in a bfloat16 layer
    layer_cache down;     // input h (rows, H)
    tensor da;            // (rows, 2H): from backward_input, for backward_weight
    bool input_done = false;
    std::size_t bytes() const override { return gate_up.bytes() + a.byte_size() + down.bytes() + da.byte_size(); }
  };
  tensor forward(const tensor& x, layer_cache& cache, const forward_context& ctx) const override;
  tensor forward_owned(tensor&& x, layer_cache& cache, const forward_context& ctx) const override;
  void backward_input(const tensor& dy, layer_cache& cache, tensor* dx) const override;
  void backward_weight(const tensor& dy, layer_cache& cache) override;

  std::vector<parameter> parameters(const std::string& prefix) override;
  std::unique_ptr<layer> clone() const override { return std::make_unique<swiglu_mlp>(*this); }
  std::string spec() const override;  // "swiglu_mlp:64:176"
  void initialize(std::uint64_t seed) override;  // each projection from its own seed
  void set_compute_dtype(dtype type) override;   // its own and its projections'
  double flops_per_row() const override { return 6.0 * double(dim_) * double(hidden_); }
  std::uint64_t derived_bytes() const override { return gate_up_.derived_bytes() + down_.derived_bytes(); }

 private:
  saved& start_forward(const tensor& x, layer_cache& cache) const;
  tensor gated_and_down(tensor a, saved& s, const forward_context& ctx) const;
  std::size_t dim_, hidden_;
  swiglu_init init_;
  linear gate_up_;  // D -> 2H
  linear down_;     // H -> D
};

// The fused projection's output rounded to `type` and stashed; returns the gated product (rows, w).
tensor swiglu_gate(tensor a, dtype type, tensor& stash);
// The gradient of the fused projection's output (rows, 2w) from the stash and dh (rows, w).
tensor swiglu_gate_backward(const tensor& stash, const tensor& dh);

}  // namespace ap

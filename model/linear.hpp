// Linear: y = x W + b over the last axis. Spec "linear:IN:OUT", options ":std=S" (normal instead of Kaiming
// uniform), ":bias=0", ":tie=I" (Note [tied weights]).
#pragma once

#include "model/layer.hpp"
#include "model/layer_spec.hpp"

namespace ap {

class linear final : public layer {
 public:
  // Weights are zero until initialize or a checkpoint sets them.
  linear(std::size_t in, std::size_t out, init_options init = {}, std::optional<std::size_t> tie = std::nullopt);

  std::string describe() const override;
  std::optional<std::size_t> in_features() const override { return in_; }
  std::optional<std::size_t> out_features() const override { return out_; }

  struct saved : saved_state {
    tensor x;  // (rows, in); bfloat16 in a bfloat16 layer
    // A bfloat16 layer's rounded dy, from backward_input for backward_weight; not stash.
    tensor dy_bf16;
    std::size_t bytes() const override { return x.byte_size(); }
    std::unique_ptr<saved_state> join_rows(const std::vector<const saved_state*>& parts) const override {
      return join_row_fields<saved>(parts, {&saved::x});
    }
  };
  tensor forward(const tensor& x, layer_cache& cache, const forward_context& ctx) const override;
  tensor forward_owned(tensor&& x, layer_cache& cache, const forward_context& ctx) const override;
  void backward_input(const tensor& dy, layer_cache& cache, tensor* dx) const override;
  void backward_weight(const tensor& dy, layer_cache& cache) override;

  std::vector<parameter> parameters(const std::string& prefix) override;
  std::unique_ptr<layer> clone() const override { return std::make_unique<linear>(*this); }
  std::string spec() const override;
  // Tied: the embedding table (out, in) layer `tie` draws from this seed, transposed.
  void initialize(std::uint64_t seed) override;
  std::optional<std::size_t> tied_to() const override { return tie_; }
  double flops_per_row() const override { return 2.0 * double(in_) * double(out_); }
  std::uint64_t derived_bytes() const override;  // its rounded weights in a bfloat16 layer
  const init_options& init() const { return init_; }

 private:
  std::size_t in_, out_;
  init_options init_;
  std::optional<std::size_t> tie_;
  tensor weight_;   // (in, out): PyTorch's transposed, so forward is x @ W
  tensor bias_;     // (out): zeros, and no parameter, without a bias
  tensor dweight_;  // (in, out)
  tensor dbias_;    // (out)
  // weight_ rounded to bfloat16 (Note [bf16 weights kept widened] in linear.cpp), remade when weight_'s
  // version or the kind of product changes. A copy starts without it.
  struct rounded_weights {
    tensor value;  // (in, out)
    std::uint64_t version = ~std::uint64_t{0};
    rounded_weights() = default;
    rounded_weights(const rounded_weights&) {}
    rounded_weights& operator=(const rounded_weights&) {
      value = tensor(), version = ~std::uint64_t{0};
      return *this;
    }
    rounded_weights(rounded_weights&&) = default;
    rounded_weights& operator=(rounded_weights&&) = default;
  };
  mutable rounded_weights weight_bf16_;
  const tensor& weight_bf16() const;
  // forward, keeping x as the stash.
  tensor forward_keeping(const tensor& x, tensor* owned, layer_cache& cache) const;
};

}  // namespace ap

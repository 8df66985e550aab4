// LayerNorm over the last axis: y = (x - mean) / sqrt(var + 1e-5) * gamma + beta. Spec "layernorm:W";
// ":bias=0": no beta.
#pragma once

#include "model/layer.hpp"

namespace ap {

class layer_norm final : public layer {
 public:
  explicit layer_norm(std::size_t width, bool bias = true);

  std::string describe() const override { return "LayerNorm(" + std::to_string(width_) + ")"; }
  std::optional<std::size_t> in_features() const override { return width_; }
  std::optional<std::size_t> out_features() const override { return width_; }

  struct saved : saved_state {
    tensor x;     // (rows, width)
    tensor mean;  // (rows)
    tensor rstd;  // (rows): 1 / sqrt(var + eps)
    // x is bfloat16 in a bfloat16 layer; mean and rstd stay float32 (Note [compute dtype]).
    std::size_t bytes() const override { return x.byte_size() + mean.byte_size() + rstd.byte_size(); }
    std::unique_ptr<saved_state> join_rows(const std::vector<const saved_state*>& parts) const override {
      return join_row_fields<saved>(parts, {&saved::x, &saved::mean, &saved::rstd});
    }
  };
  tensor forward(const tensor& x, layer_cache& cache, const forward_context& ctx) const override;
  void backward_input(const tensor& dy, layer_cache& cache, tensor* dx) const override;
  void backward_weight(const tensor& dy, layer_cache& cache) override;

  std::vector<parameter> parameters(const std::string& prefix) override;
  std::unique_ptr<layer> clone() const override { return std::make_unique<layer_norm>(*this); }
  std::string spec() const override { return "layernorm:" + std::to_string(width_) + (bias_ ? "" : ":bias=0"); }
  void initialize(std::uint64_t seed) override;  // gamma 1, beta 0: the seed is not needed

  static constexpr float eps = 1e-5f;

 private:
  std::size_t width_;
  bool bias_;
  tensor gamma_;   // (width)
  tensor beta_;    // (width): zeros, and no parameter, without a bias
  tensor dgamma_;  // (width)
  tensor dbeta_;   // (width)
};

}  // namespace ap

// RMSNorm over the last axis: y = x / sqrt(mean(x^2) + 1e-5) * weight, per row (no mean taken out, no bias).
// Spec "rmsnorm:WIDTH". Replicated, not split, under tensor parallelism (as LayerNorm).
#pragma once

#include "model/layer.hpp"

namespace ap {

class rms_norm final : public layer {
 public:
  explicit rms_norm(std::size_t width);

  std::string describe() const override { return "RMSNorm(" + std::to_string(width_) + ")"; }
  std::optional<std::size_t> in_features() const override { return width_; }
  std::optional<std::size_t> out_features() const override { return width_; }

  struct saved : saved_state {
    tensor x;     // (rows, width)
    tensor rstd;  // (rows): 1 / sqrt(mean(x^2) + eps)
    // x is bfloat16 in a bfloat16 layer; rstd stays float32 (Note [compute dtype]).
    std::size_t bytes() const override { return x.byte_size() + rstd.byte_size(); }
    std::unique_ptr<saved_state> join_rows(const std::vector<const saved_state*>& parts) const override {
      return join_row_fields<saved>(parts, {&saved::x, &saved::rstd});
    }
  };
  tensor forward(const tensor& x, layer_cache& cache, const forward_context& ctx) const override;
  void backward_input(const tensor& dy, layer_cache& cache, tensor* dx) const override;
  void backward_weight(const tensor& dy, layer_cache& cache) override;

  std::vector<parameter> parameters(const std::string& prefix) override;
  std::unique_ptr<layer> clone() const override { return std::make_unique<rms_norm>(*this); }
  std::string spec() const override { return "rmsnorm:" + std::to_string(width_); }
  void initialize(std::uint64_t seed) override;  // weight 1: the seed is not needed

  static constexpr float eps = 1e-5f;

 private:
  std::size_t width_;
  tensor weight_;   // (width)
  tensor dweight_;  // (width)
};

}  // namespace ap

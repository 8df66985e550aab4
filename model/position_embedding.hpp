// Learned positional embedding: y[b, t] = x[b, t] + P[t], for sequences of at most `context` positions.
#pragma once

#include "model/layer.hpp"

namespace ap {

class position_embedding final : public layer {
 public:
  // std > 0 (":std=S"): initialised normal(0, std).
  position_embedding(std::size_t context, std::size_t dim, float std = 0.0f);

  std::string describe() const override;  // "Position(8x64)"
  std::optional<std::size_t> in_features() const override { return dim_; }
  std::optional<std::size_t> out_features() const override { return dim_; }

  struct saved : saved_state {
    shape_t shape;  // (batch, sequence, dim) of the input; no values needed
    std::size_t bytes() const override { return 0; }  // no tensor
  };
  // x (batch, sequence, dim) with sequence <= context; throws naming the shape otherwise.
  tensor forward(const tensor& x, layer_cache& cache, const forward_context& ctx) const override;
  void backward_input(const tensor& dy, layer_cache& cache, tensor* dx) const override;  // dx += dy
  void backward_weight(const tensor& dy, layer_cache& cache) override;                  // dP[t] += sum_b dy[b, t]

  std::vector<parameter> parameters(const std::string& prefix) override;
  std::unique_ptr<layer> clone() const override { return std::make_unique<position_embedding>(*this); }
  std::string spec() const override;  // "position:8:64"
  void initialize(std::uint64_t seed) override;  // uniform, std 0.02; normal(0, std) if std given

 private:
  std::size_t context_, dim_;
  float std_;  // 0: the uniform default
  tensor weight_;   // (context, dim)
  tensor dweight_;  // (context, dim)
};

}  // namespace ap

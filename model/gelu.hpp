// GELU, tanh approximation (as GPT-2, spec "gelu"): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))); or exact
// (spec "gelu:exact", PyTorch's default): x Phi(x) = 0.5 x (1 + erf(x / sqrt(2))).
#pragma once

#include "model/layer.hpp"

namespace ap {

class gelu final : public layer {
 public:
  explicit gelu(bool exact = false) : exact_(exact) {}
  bool exact() const { return exact_; }
  std::string describe() const override { return exact_ ? "GELU(exact)" : "GELU"; }
  struct saved : saved_state {
    tensor x;  // (rows, features); bfloat16 in a bfloat16 layer
    std::size_t bytes() const override { return x.byte_size(); }
    std::unique_ptr<saved_state> join_rows(const std::vector<const saved_state*>& parts) const override {
      return join_row_fields<saved>(parts, {&saved::x});
    }
  };
  tensor forward(const tensor& x, layer_cache& cache, const forward_context& ctx) const override;
  tensor forward_owned(tensor&& x, layer_cache& cache, const forward_context& ctx) const override;
  void backward_input(const tensor& dy, layer_cache& cache, tensor* dx) const override;
  std::unique_ptr<layer> clone() const override { return std::make_unique<gelu>(*this); }
  std::string spec() const override { return exact_ ? "gelu:exact" : "gelu"; }

 private:
  bool exact_;
  void apply(const float* x, float* y, std::size_t n) const;                   // y = gelu(x)
  void derivative(const float* x, const float* dy, float* dx, std::size_t n) const;  // dx = gelu'(x) dy
};

}  // namespace ap

// ReLU: max(0, x), element-wise.
#pragma once

#include "model/layer.hpp"

namespace ap {

class relu final : public layer {
 public:
  std::string describe() const override { return "ReLU"; }
  struct saved : saved_state {
    tensor y;  // (rows, features): y > 0 marks where the gradient passes; bfloat16 in a bfloat16 layer
    std::size_t bytes() const override { return y.byte_size(); }
    std::unique_ptr<saved_state> join_rows(const std::vector<const saved_state*>& parts) const override {
      return join_row_fields<saved>(parts, {&saved::y});
    }
  };
  tensor forward(const tensor& x, layer_cache& cache, const forward_context& ctx) const override;
  void backward_input(const tensor& dy, layer_cache& cache, tensor* dx) const override;
  std::unique_ptr<layer> clone() const override { return std::make_unique<relu>(*this); }
  std::string spec() const override { return "relu"; }
};

}  // namespace ap

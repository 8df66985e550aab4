// Tanh, element-wise. (Not named ap::tanh: that would hide std::tanh inside namespace ap.)
#pragma once

#include "model/layer.hpp"

namespace ap {

class tanh_layer final : public layer {
 public:
  std::string describe() const override { return "Tanh"; }
  struct saved : saved_state {
    tensor y;  // (rows, features): dtanh = 1 - y^2; bfloat16 in a bfloat16 layer
    std::size_t bytes() const override { return y.byte_size(); }
    std::unique_ptr<saved_state> join_rows(const std::vector<const saved_state*>& parts) const override {
      return join_row_fields<saved>(parts, {&saved::y});
    }
  };
  tensor forward(const tensor& x, layer_cache& cache, const forward_context& ctx) const override;
  void backward_input(const tensor& dy, layer_cache& cache, tensor* dx) const override;
  std::unique_ptr<layer> clone() const override { return std::make_unique<tanh_layer>(*this); }
  std::string spec() const override { return "tanh"; }
};

}  // namespace ap

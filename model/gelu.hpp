// GELU, tanh approximation (as GPT-2): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
#pragma once

#include "model/layer.hpp"

namespace ap {

class gelu final : public layer {
 public:
  std::string describe() const override { return "GELU"; }
  // cache.saved = {x (rows, features)}
  tensor forward(const tensor& x, layer_cache& cache, const forward_context& ctx) const override;
  tensor backward_input(const tensor& dy, const layer_cache& cache) const override;
  std::unique_ptr<layer> clone() const override { return std::make_unique<gelu>(*this); }
  std::string spec() const override { return "gelu"; }
};

}  // namespace ap

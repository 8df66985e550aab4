// Sleep: the identity that takes a fixed wall time without using the CPU (forward_ms, and backward_ms
// split evenly between backward_input and backward_weight), for measuring the runtime's overhead
// and for tests that need a slow task.
#pragma once

#include "model/layer.hpp"

namespace ap {

class sleep_layer final : public layer {
 public:
  sleep_layer(double forward_ms, double backward_ms) : forward_ms_(forward_ms), backward_ms_(backward_ms) {}
  std::string describe() const override;
  tensor forward(const tensor& x, layer_cache& cache, const forward_context& ctx) const override;
  void backward_input(const tensor& dy, layer_cache& cache, tensor* dx) const override;
  void backward_weight(const tensor& dy, layer_cache& cache) override;
  std::unique_ptr<layer> clone() const override { return std::make_unique<sleep_layer>(*this); }
  std::string spec() const override;

 private:
  double forward_ms_, backward_ms_;
};

}  // namespace ap

#include "model/sleep_layer.hpp"

#include <chrono>
#include <thread>

#include "model/spec_text.hpp"

namespace ap {
namespace {
void sleep_ms(double ms) {
  if (ms > 0) std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(ms));
}
}  // namespace

std::string sleep_layer::describe() const {
  return "Sleep(" + format_float(static_cast<float>(forward_ms_)) + "ms, " +
         format_float(static_cast<float>(backward_ms_)) + "ms)";
}

std::string sleep_layer::spec() const {
  return "sleep:" + format_float(static_cast<float>(forward_ms_)) + ":" + format_float(static_cast<float>(backward_ms_));
}

tensor sleep_layer::forward(const tensor& x, layer_cache&, const forward_context&) const {
  sleep_ms(forward_ms_);
  return x;
}

void sleep_layer::backward_input(const tensor& dy, layer_cache&, tensor* dx) const {
  sleep_ms(backward_ms_ / 2);
  if (!dx) return;
  const float* pdy = dy.data();
  accumulate_elementwise(*dx, shape_of(dy), *this, [=](std::size_t i) { return pdy[i]; });
}

void sleep_layer::backward_weight(const tensor&, layer_cache&) { sleep_ms(backward_ms_ / 2); }

}  // namespace ap

// make_layer: the one place that maps spec() texts back to layer types.
#include <stdexcept>

#include "model/dropout.hpp"
#include "model/gelu.hpp"
#include "model/layer.hpp"
#include "model/layer_norm.hpp"
#include "model/linear.hpp"
#include "model/relu.hpp"
#include "model/sigmoid.hpp"
#include "model/sleep_layer.hpp"
#include "model/spec_text.hpp"
#include "model/tanh.hpp"

namespace ap {

std::unique_ptr<layer> make_layer(const std::string& spec) {
  const std::vector<std::string> f = split_fields(spec, ':');
  const std::string& kind = f[0];
  const auto arity = [&](std::size_t n, const char* form) {
    if (f.size() != n) throw std::invalid_argument("bad layer spec '" + spec + "': expected " + form);
  };
  if (kind == "linear") {
    arity(3, "linear:IN:OUT");
    return std::make_unique<linear>(parse_width(f[1], spec), parse_width(f[2], spec));
  }
  if (kind == "layernorm") {
    arity(2, "layernorm:WIDTH");
    return std::make_unique<layer_norm>(parse_width(f[1], spec));
  }
  if (kind == "dropout") {
    arity(3, "dropout:P:SEED");
    const float p = parse_float(f[1], spec);
    if (!(p >= 0.0f && p < 1.0f))
      throw std::invalid_argument("bad layer spec '" + spec + "': dropout probability must be in [0, 1)");
    return std::make_unique<dropout>(p, parse_seed(f[2], spec));
  }
  if (kind == "sleep") {
    arity(3, "sleep:FORWARD_MS:BACKWARD_MS");
    const float forward_ms = parse_float(f[1], spec), backward_ms = parse_float(f[2], spec);
    if (forward_ms < 0 || backward_ms < 0)
      throw std::invalid_argument("bad layer spec '" + spec + "': sleep times must not be negative");
    return std::make_unique<sleep_layer>(forward_ms, backward_ms);
  }
  if (f.size() == 1) {
    if (kind == "relu") return std::make_unique<relu>();
    if (kind == "gelu") return std::make_unique<gelu>();
    if (kind == "tanh") return std::make_unique<tanh_layer>();
    if (kind == "sigmoid") return std::make_unique<sigmoid>();
  }
  throw std::invalid_argument("bad layer spec '" + spec +
                              "': expected linear:IN:OUT, relu, gelu, tanh, sigmoid, layernorm:WIDTH "
                              "dropout:P:SEED or sleep:FORWARD_MS:BACKWARD_MS");
}

}  // namespace ap

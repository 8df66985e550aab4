#include "model/optimizer.hpp"

#include <cmath>
#include <stdexcept>

#include "model/spec_text.hpp"
#include "tensor/compute.hpp"

namespace ap {

namespace {

void check_parameter(const parameter& p) {
  if (!p.value || !p.grad)
    throw std::invalid_argument("optimizer: parameter " + p.name + " has no value or no gradient");
  if (p.value->shape() != p.grad->shape())
    throw std::invalid_argument("optimizer: parameter " + p.name + " has shape " + shape_string(*p.value) +
                                " but its gradient " + shape_string(*p.grad));
}

// The value of a parameter whose state init_state creates (it needs no gradient).
const tensor& checked_value(const parameter& p) {
  if (!p.value) throw std::invalid_argument("optimizer: parameter " + p.name + " has no value");
  return *p.value;
}

// The state tensor `key`, created as zeros shaped like `value` at its first use.
tensor& state_for(std::map<std::string, tensor>& states, const std::string& key, const tensor& value) {
  auto it = states.find(key);
  if (it == states.end()) it = states.emplace(key, zeros(shape_of(value))).first;
  if (it->second.shape() != value.shape())
    throw std::invalid_argument("optimizer: state " + key + " has shape " + shape_string(it->second) +
                                " but its parameter " + shape_string(value));
  return it->second;
}

std::map<std::string, tensor*> pointers(std::map<std::string, tensor>& states) {
  std::map<std::string, tensor*> out;
  for (auto& [key, t] : states) out[key] = &t;
  return out;
}

class sgd final : public optimizer {
 public:
  explicit sgd(const optimizer_config& c) : c_(c) {}

  void step(const std::vector<parameter>& params) override {
    for (const parameter& p : params) {
      check_parameter(p);
      float* w = p.value->data();
      const float* g = p.grad->data();
      const std::ptrdiff_t n = static_cast<std::ptrdiff_t>(p.value->size());
      if (c_.momentum == 0.0f) {
#pragma omp parallel for simd schedule(static) if (n >= parallel_elements)
        for (std::ptrdiff_t i = 0; i < n; ++i) w[i] -= c_.lr * (g[i] + c_.weight_decay * w[i]);
        continue;
      }
      float* v = state_for(states_, p.name + ".momentum", *p.value).data();  // v = momentum v + g
#pragma omp parallel for simd schedule(static) if (n >= parallel_elements)
      for (std::ptrdiff_t i = 0; i < n; ++i) {
        const float gi = g[i] + c_.weight_decay * w[i];
        v[i] = c_.momentum * v[i] + gi;
        w[i] -= c_.lr * (c_.nesterov ? gi + c_.momentum * v[i] : v[i]);
      }
    }
    ++steps_;
  }
  std::map<std::string, tensor*> state() override { return pointers(states_); }
  void init_state(const std::vector<parameter>& params) override {
    if (c_.momentum == 0.0f) return;  // plain SGD keeps no state
    for (const parameter& p : params) state_for(states_, p.name + ".momentum", checked_value(p));
  }

 private:
  optimizer_config c_;
  std::map<std::string, tensor> states_;
};

// Adam, and AdamW when `decoupled`: the decay shrinks the weights directly instead of joining the gradient.
class adam final : public optimizer {
 public:
  adam(const optimizer_config& c, bool decoupled) : c_(c), decoupled_(decoupled) {}

  void step(const std::vector<parameter>& params) override {
    const double t = double(steps_ + 1);
    const float correction1 = static_cast<float>(1.0 - std::pow(double(c_.beta1), t));
    const float correction2 = static_cast<float>(1.0 - std::pow(double(c_.beta2), t));
    const float l2 = decoupled_ ? 0.0f : c_.weight_decay;
    const float shrink = decoupled_ ? 1.0f - c_.lr * c_.weight_decay : 1.0f;
    for (const parameter& p : params) {
      check_parameter(p);
      float* w = p.value->data();
      const float* g = p.grad->data();
      float* m = state_for(states_, p.name + ".m", *p.value).data();
      float* v = state_for(states_, p.name + ".v", *p.value).data();
      const std::ptrdiff_t n = static_cast<std::ptrdiff_t>(p.value->size());
      // Note [parallel element loops] in tensor/compute.hpp.
#pragma omp parallel for simd schedule(static) if (n >= parallel_elements)
      for (std::ptrdiff_t i = 0; i < n; ++i) {
        const float gi = g[i] + l2 * w[i];
        m[i] = c_.beta1 * m[i] + (1.0f - c_.beta1) * gi;
        v[i] = c_.beta2 * v[i] + (1.0f - c_.beta2) * gi * gi;
        const float m_hat = m[i] / correction1;
        const float v_hat = v[i] / correction2;
        w[i] = w[i] * shrink - c_.lr * m_hat / (std::sqrt(v_hat) + c_.eps);
      }
    }
    ++steps_;
  }
  std::map<std::string, tensor*> state() override { return pointers(states_); }
  void init_state(const std::vector<parameter>& params) override {
    for (const parameter& p : params) {
      state_for(states_, p.name + ".m", checked_value(p));
      state_for(states_, p.name + ".v", checked_value(p));
    }
  }

 private:
  optimizer_config c_;
  bool decoupled_;
  std::map<std::string, tensor> states_;
};

[[noreturn]] void bad_setting(const std::string& what, float value, const char* wanted) {
  throw std::invalid_argument("optimizer: " + what + " " + format_float(value) + " is not " + wanted);
}

}  // namespace

std::unique_ptr<optimizer> make_optimizer(const optimizer_config& c) {
  if (c.kind != "sgd" && c.kind != "adam" && c.kind != "adamw")
    throw std::invalid_argument("unknown optimizer '" + c.kind + "': expected sgd, adam or adamw");
  if (!(c.lr > 0.0f) || !std::isfinite(c.lr)) bad_setting("learning rate", c.lr, "a positive number");
  if (!(c.weight_decay >= 0.0f) || !std::isfinite(c.weight_decay))
    bad_setting("weight_decay", c.weight_decay, "a non-negative number");
  if (c.kind == "sgd") {
    if (!(c.momentum >= 0.0f && c.momentum < 1.0f)) bad_setting("momentum", c.momentum, "in [0, 1)");
    if (c.nesterov && c.momentum == 0.0f)
      throw std::invalid_argument("optimizer: nesterov needs a momentum > 0");
    return std::make_unique<sgd>(c);
  }
  if (!(c.beta1 >= 0.0f && c.beta1 < 1.0f)) bad_setting("beta1", c.beta1, "in [0, 1)");
  if (!(c.beta2 >= 0.0f && c.beta2 < 1.0f)) bad_setting("beta2", c.beta2, "in [0, 1)");
  if (!(c.eps > 0.0f)) bad_setting("eps", c.eps, "a positive number");
  return std::make_unique<adam>(c, c.kind == "adamw");
}

}  // namespace ap

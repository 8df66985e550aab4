#include "model/optimizer.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <vector>

#include "collective/shard.hpp"
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

// The value of a parameter whose state init_state creates.
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

// Note [one team per optimizer step]: all parameters' elements are cut into pieces of at most optimizer_piece
// elements, and one `omp parallel for` over all pieces runs the update, instead of a team (start-up, barrier)
// per tensor. Each element is updated alone by the same instructions, so any thread count gives the same bits.
constexpr std::size_t optimizer_piece = std::size_t(1) << 14;

struct piece {
  std::size_t param;        // index into the step's pointer lists
  std::size_t begin, end;   // element range
};

// The pieces of part `part` of `parts` of every parameter (Note [shared optimizer step]); `total` their elements.
std::vector<piece> pieces_of(const std::vector<parameter>& params, std::size_t part, std::size_t parts,
                             std::size_t* total) {
  std::vector<piece> out;
  *total = 0;
  for (std::size_t p = 0; p < params.size(); ++p) {
    const auto [first, last] = shard_rows(params[p].value->size(), parts, part);
    for (std::size_t b = first; b < last; b += optimizer_piece) out.push_back({p, b, std::min(last, b + optimizer_piece)});
    *total += last - first;
  }
  return out;
}

class sgd final : public optimizer {
 public:
  explicit sgd(const optimizer_config& c) : c_(c) {}

  void step_part(const std::vector<parameter>& params, std::size_t part, std::size_t parts) override {
    // The state is found (or made) serially, then one team updates every parameter.
    std::vector<float*> w(params.size()), v(params.size());
    std::vector<const float*> g(params.size());
    for (std::size_t p = 0; p < params.size(); ++p) {
      check_parameter(params[p]);
      w[p] = params[p].value->data();
      g[p] = params[p].grad->data();
      if (c_.momentum != 0.0f) v[p] = state_for(states_, params[p].name + ".momentum", *params[p].value).data();
    }
    std::size_t total = 0;
    const std::vector<piece> pieces = pieces_of(params, part, parts, &total);
    const auto count = static_cast<std::ptrdiff_t>(pieces.size());
    // Note [lr from the optimizer's steps].
    const float lr = lr_at(c_, static_cast<std::uint64_t>(steps_)), decay = c_.weight_decay, momentum = c_.momentum;
    const bool nesterov = c_.nesterov;
#pragma omp parallel for schedule(static) if (std::ptrdiff_t(total) >= parallel_elements)
    for (std::ptrdiff_t k = 0; k < count; ++k) {
      const piece& pc = pieces[std::size_t(k)];
      float* pw = w[pc.param];
      const float* pg = g[pc.param];
      const auto begin = static_cast<std::ptrdiff_t>(pc.begin), end = static_cast<std::ptrdiff_t>(pc.end);
      if (momentum == 0.0f) {
#pragma omp simd
        for (std::ptrdiff_t i = begin; i < end; ++i) pw[i] -= lr * (pg[i] + decay * pw[i]);
        continue;
      }
      float* pv = v[pc.param];  // v = momentum v + g
#pragma omp simd
      for (std::ptrdiff_t i = begin; i < end; ++i) {
        const float gi = pg[i] + decay * pw[i];
        pv[i] = momentum * pv[i] + gi;
        pw[i] -= lr * (nesterov ? gi + momentum * pv[i] : pv[i]);
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

// Adam, and AdamW when `decoupled` (the decay shrinks the weights directly).
class adam final : public optimizer {
 public:
  adam(const optimizer_config& c, bool decoupled) : c_(c), decoupled_(decoupled) {}

  void step_part(const std::vector<parameter>& params, std::size_t part, std::size_t parts) override {
    const double t = double(steps_ + 1);
    const float correction1 = static_cast<float>(1.0 - std::pow(double(c_.beta1), t));
    const float correction2 = static_cast<float>(1.0 - std::pow(double(c_.beta2), t));
    const float lr = lr_at(c_, static_cast<std::uint64_t>(steps_));  // Note [lr from the optimizer's steps]
    const float l2 = decoupled_ ? 0.0f : c_.weight_decay;
    const float shrink = decoupled_ ? 1.0f - lr * c_.weight_decay : 1.0f;
    // The state serially, then one team over every parameter's pieces.
    std::vector<float*> w(params.size()), m(params.size()), v(params.size());
    std::vector<const float*> g(params.size());
    for (std::size_t p = 0; p < params.size(); ++p) {
      check_parameter(params[p]);
      w[p] = params[p].value->data();
      g[p] = params[p].grad->data();
      m[p] = state_for(states_, params[p].name + ".m", *params[p].value).data();
      v[p] = state_for(states_, params[p].name + ".v", *params[p].value).data();
    }
    std::size_t total = 0;
    const std::vector<piece> pieces = pieces_of(params, part, parts, &total);
    const auto count = static_cast<std::ptrdiff_t>(pieces.size());
    const float beta1 = c_.beta1, beta2 = c_.beta2, eps = c_.eps;
#pragma omp parallel for schedule(static) if (std::ptrdiff_t(total) >= parallel_elements)
    for (std::ptrdiff_t k = 0; k < count; ++k) {
      const piece& pc = pieces[std::size_t(k)];
      float* pw = w[pc.param];
      const float* pg = g[pc.param];
      float* pm = m[pc.param];
      float* pv = v[pc.param];
      const auto begin = static_cast<std::ptrdiff_t>(pc.begin), end = static_cast<std::ptrdiff_t>(pc.end);
#pragma omp simd
      for (std::ptrdiff_t i = begin; i < end; ++i) {
        const float gi = pg[i] + l2 * pw[i];
        pm[i] = beta1 * pm[i] + (1.0f - beta1) * gi;
        pv[i] = beta2 * pv[i] + (1.0f - beta2) * gi * gi;
        const float m_hat = pm[i] / correction1;
        const float v_hat = pv[i] / correction2;
        pw[i] = pw[i] * shrink - lr * m_hat / (std::sqrt(v_hat) + eps);
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
  check_lr_schedule(c);
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

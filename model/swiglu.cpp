#include "model/swiglu.hpp"

#include <cmath>
#include <stdexcept>

#include "random/seeded_random.hpp"
#include "tensor/compute.hpp"

namespace ap {

void swiglu_forward(const float* a, std::size_t rows, std::size_t w, float* h) {
  const auto n = static_cast<std::ptrdiff_t>(rows);
  // Note [parallel element loops] in tensor/compute.hpp: rows are independent, any thread count gives the same bits.
#pragma omp parallel for schedule(static) if (std::ptrdiff_t(rows * w) >= parallel_elements)
  for (std::ptrdiff_t r = 0; r < n; ++r) {
    const float* gate = a + std::size_t(r) * 2 * w;
    const float* up = gate + w;
    float* out = h + std::size_t(r) * w;
    // exp(-g) overflows to inf for g < -88: sigmoid 0, silu 0, no NaN.
    for (std::size_t i = 0; i < w; ++i) out[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
  }
}

void swiglu_backward(const float* a, const float* dh, std::size_t rows, std::size_t w, float* da) {
  const auto n = static_cast<std::ptrdiff_t>(rows);
#pragma omp parallel for schedule(static) if (std::ptrdiff_t(rows * w) >= parallel_elements)
  for (std::ptrdiff_t r = 0; r < n; ++r) {
    const float* gate = a + std::size_t(r) * 2 * w;
    const float* up = gate + w;
    const float* d = dh + std::size_t(r) * w;
    float* dgate = da + std::size_t(r) * 2 * w;
    float* dup = dgate + w;
    for (std::size_t i = 0; i < w; ++i) {
      const float g = gate[i], sigmoid = 1.0f / (1.0f + std::exp(-g));
      dgate[i] = d[i] * up[i] * sigmoid * (1.0f + g * (1.0f - sigmoid));  // silu'(g) = s (1 + g (1 - s))
      dup[i] = d[i] * g * sigmoid;
    }
  }
}

tensor swiglu_gate(tensor a, dtype type, tensor& stash) {
  round_to_compute_dtype(a, type);
  const std::size_t n = rows(a), w = cols(a) / 2;
  shape_t shape = shape_of(a);
  shape.back() = w;
  tensor h = tensor::from_shape(shape);
  swiglu_forward(a.data(), n, w, h.data());
  if (type == dtype::float32)
    stash = std::move(a);
  else
    stash_as(stash, a, type);  // exact: a holds values of `type`
  return h;
}

tensor swiglu_gate_backward(const tensor& stash, const tensor& dh) {
  tensor scratch;
  const tensor& a = float32_view(stash, scratch);
  tensor da = tensor::from_shape(a.shape());
  swiglu_backward(a.data(), dh.data(), rows(a), cols(a) / 2, da.data());
  return da;
}

swiglu_init parse_swiglu_init(const layer_spec& s) {
  swiglu_init init;
  init.gate_up = parse_init_options(s, "std");
  init.down = parse_init_options(s, "down_std");
  return init;
}

std::string swiglu_init_text(const swiglu_init& init) {
  return init_options_text({init.gate_up.std, true}) + init_options_text({init.down.std, true}, "down_std") +
         (init.gate_up.bias ? "" : ":bias=0");
}

namespace {

std::size_t checked_dim(std::size_t dim, std::size_t hidden) {
  if (dim == 0 || hidden == 0)
    throw std::invalid_argument("SwiGLU needs positive widths, got dim " + std::to_string(dim) + " and hidden " +
                                std::to_string(hidden));
  return dim;
}

}  // namespace

swiglu_mlp::swiglu_mlp(std::size_t dim, std::size_t hidden, swiglu_init init)
    : dim_(checked_dim(dim, hidden)), hidden_(hidden), init_(init), gate_up_(dim, 2 * hidden, init.gate_up),
      down_(hidden, dim, init.down) {}

std::string swiglu_mlp::describe() const {
  return "SwiGLU(" + std::to_string(dim_) + "->" + std::to_string(hidden_) + "->" + std::to_string(dim_) + ")";
}

std::string swiglu_mlp::spec() const {
  return "swiglu_mlp:" + std::to_string(dim_) + ":" + std::to_string(hidden_) + swiglu_init_text(init_);
}

swiglu_mlp::saved& swiglu_mlp::start_forward(const tensor& x, layer_cache& cache) const {
  if (cols(x) != dim_)
    throw std::invalid_argument(describe() + " takes " + std::to_string(dim_) + " features, got input of shape " +
                                shape_string(x));
  saved& s = cache.emplace<saved>();
  s.input_done = false;
  return s;
}

tensor swiglu_mlp::gated_and_down(tensor a, saved& s, const forward_context& ctx) const {
  tensor h = swiglu_gate(std::move(a), compute_dtype(), s.a);
  return down_.forward_owned(std::move(h), s.down, ctx);  // Note [owned input]
}

tensor swiglu_mlp::forward(const tensor& x, layer_cache& cache, const forward_context& ctx) const {
  saved& s = start_forward(x, cache);
  return gated_and_down(gate_up_.forward(x, s.gate_up, ctx), s, ctx);
}

tensor swiglu_mlp::forward_owned(tensor&& x, layer_cache& cache, const forward_context& ctx) const {
  saved& s = start_forward(x, cache);
  return gated_and_down(gate_up_.forward_owned(std::move(x), s.gate_up, ctx), s, ctx);
}

void swiglu_mlp::backward_input(const tensor& dy, layer_cache& cache, tensor* dx) const {
  saved& s = cache.get<saved>(*this);
  shape_t shape = shape_of(s.a);
  shape.back() = dim_;
  check_dy_shape(dy, shape, *this);
  tensor dh;  // (rows, H)
  down_.backward_input(dy, s.down, &dh);
  s.da = swiglu_gate_backward(s.a, dh);
  gate_up_.backward_input(s.da, s.gate_up, dx);
  s.input_done = true;
}

void swiglu_mlp::backward_weight(const tensor& dy, layer_cache& cache) {
  saved& s = cache.get<saved>(*this);
  if (!s.input_done)
    throw std::invalid_argument(describe() + " backward_weight: run backward_input first (it computes the gate's dy)");
  down_.backward_weight(dy, s.down);
  gate_up_.backward_weight(s.da, s.gate_up);
}

std::vector<parameter> swiglu_mlp::parameters(const std::string& prefix) {
  std::vector<parameter> all = gate_up_.parameters(prefix + "gate_up.");
  for (parameter& p : down_.parameters(prefix + "down.")) all.push_back(p);
  return all;
}

void swiglu_mlp::initialize(std::uint64_t seed) {
  gate_up_.initialize(hash_counters(seed, 0));
  down_.initialize(hash_counters(seed, 1));
}

void swiglu_mlp::set_compute_dtype(dtype type) {
  layer::set_compute_dtype(type);
  gate_up_.set_compute_dtype(type);
  down_.set_compute_dtype(type);
}

}  // namespace ap

#include "model/parallel_swiglu.hpp"

#include <stdexcept>

#include "random/seeded_random.hpp"

namespace ap {

namespace {

std::size_t checked_dim(std::size_t dim, std::size_t hidden) {
  if (dim == 0 || hidden == 0)
    throw std::invalid_argument("ParallelSwiGLU needs positive widths, got dim " + std::to_string(dim) +
                                " and hidden " + std::to_string(hidden));
  return dim;
}

}  // namespace

parallel_swiglu_mlp::parallel_swiglu_mlp(std::size_t dim, std::size_t hidden, swiglu_init init)
    : dim_(checked_dim(dim, hidden)), hidden_(hidden), init_(init), gate_up_(dim, 2 * hidden, 2, init.gate_up),
      down_(hidden, dim, init.down) {}

std::string parallel_swiglu_mlp::describe() const {
  return "ParallelSwiGLU(" + std::to_string(dim_) + "->" + std::to_string(hidden_) + "->" + std::to_string(dim_) +
         ")" + (group_ ? " rank " + std::to_string(group_->rank()) + " of " + std::to_string(group_->size()) : "");
}

std::string parallel_swiglu_mlp::spec() const {
  return "parallel_swiglu_mlp:" + std::to_string(dim_) + ":" + std::to_string(hidden_) + swiglu_init_text(init_);
}

void parallel_swiglu_mlp::join_group(std::shared_ptr<process_group> group) {
  if (group_) throw std::logic_error(describe() + " already joined group '" + group_->name() + "'");
  const auto size = static_cast<std::size_t>(group->size());
  if (hidden_ % size != 0)
    throw std::invalid_argument(describe() + " cannot split its " + std::to_string(hidden_) + " hidden units over " +
                                std::to_string(size) + " tensor-parallel ranks of group '" + group->name() + "': " +
                                std::to_string(size) + " does not divide " + std::to_string(hidden_));
  gate_up_.join_group(group);  // units [r H / T, (r + 1) H / T) of gate and up (Note [tensor-parallel SwiGLU])
  down_.join_group(group);     // and the same rows of the down projection
  group_ = std::move(group);
}

std::vector<tensor_parallel_layer::sharded_value> parallel_swiglu_mlp::sharded_values() const {
  std::vector<sharded_value> all = gate_up_.sharded_values();
  for (const sharded_value& v : down_.sharded_values()) all.push_back(v);
  return all;
}

void parallel_swiglu_mlp::initialize(std::uint64_t seed) {
  gate_up_.initialize(hash_counters(seed, 0));  // swiglu_mlp::initialize's seeds: the same weights
  down_.initialize(hash_counters(seed, 1));
}

void parallel_swiglu_mlp::set_compute_dtype(dtype type) {
  layer::set_compute_dtype(type);
  gate_up_.set_compute_dtype(type);
  down_.set_compute_dtype(type);
}

parallel_swiglu_mlp::saved& parallel_swiglu_mlp::start_forward(const tensor& x, layer_cache& cache) const {
  if (cols(x) != dim_)
    throw std::invalid_argument(describe() + " takes " + std::to_string(dim_) + " features, got input of shape " +
                                shape_string(x));
  saved& s = cache.emplace<saved>();
  s.input_done = false;
  return s;
}

tensor parallel_swiglu_mlp::gated_and_down(tensor a, saved& s, const forward_context& ctx) const {
  tensor h = swiglu_gate(std::move(a), compute_dtype(), s.a);  // this rank's units, no collective
  return down_.forward_owned(std::move(h), s.down, ctx);       // the forward's one all-reduce, then the whole bias
}

tensor parallel_swiglu_mlp::forward(const tensor& x, layer_cache& cache, const forward_context& ctx) const {
  saved& s = start_forward(x, cache);
  return gated_and_down(gate_up_.forward(x, s.gate_up, ctx), s, ctx);
}

tensor parallel_swiglu_mlp::forward_owned(tensor&& x, layer_cache& cache, const forward_context& ctx) const {
  saved& s = start_forward(x, cache);
  return gated_and_down(gate_up_.forward_owned(std::move(x), s.gate_up, ctx), s, ctx);
}

// Up to the fused projection's input gradient, left summing in the group (the backward's one all-reduce).
column_parallel_linear::pending_dx parallel_swiglu_mlp::start_backward_input(const tensor& dy, layer_cache& cache,
                                                                            tensor* dx) const {
  saved& s = cache.get<saved>(*this);
  shape_t shape = shape_of(s.a);
  shape.back() = dim_;
  check_dy_shape(dy, down_.output_shape(shape), *this);
  tensor dh;  // (rows, h): this rank's units, no collective
  down_.backward_input(dy, s.down, &dh);
  s.da = swiglu_gate_backward(s.a, dh);
  auto pending = gate_up_.start_backward_input(s.da, s.gate_up, dx);
  s.input_done = true;
  return pending;
}

void parallel_swiglu_mlp::backward_input(const tensor& dy, layer_cache& cache, tensor* dx) const {
  auto pending = start_backward_input(dy, cache, dx);
  gate_up_.finish_backward_input(pending);
}

void parallel_swiglu_mlp::backward(const tensor& dy, layer_cache& cache, tensor* dx) {
  auto pending = start_backward_input(dy, cache, dx);
  backward_weight(dy, cache);  // while the group sums the partial dx
  gate_up_.finish_backward_input(pending);
}

void parallel_swiglu_mlp::backward_weight(const tensor& dy, layer_cache& cache) {
  saved& s = cache.get<saved>(*this);
  if (!s.input_done)
    throw std::invalid_argument(describe() + " backward_weight: run backward_input first (it computes the gate's dy)");
  down_.backward_weight(dy, s.down);
  gate_up_.backward_weight(s.da, s.gate_up);
}

std::vector<parameter> parallel_swiglu_mlp::parameters(const std::string& prefix) {
  std::vector<parameter> all = gate_up_.parameters(prefix + "gate_up.");
  for (parameter& p : down_.parameters(prefix + "down.")) all.push_back(p);
  return all;
}

}  // namespace ap

#include "model/block.hpp"

#include <stdexcept>

#include "model/parallel_linear.hpp"
#include "model/sequence_parallel.hpp"
#include "random/seeded_random.hpp"
#include "tensor/elementwise.hpp"

namespace ap {

namespace {

std::string part_name(std::size_t i, const layer& l) { return "part " + std::to_string(i) + " " + l.describe(); }

std::optional<std::size_t> first_in(const std::vector<std::unique_ptr<layer>>& parts) {
  for (const auto& p : parts)
    if (auto in = p->in_features()) return in;
  return std::nullopt;
}

std::optional<std::size_t> last_out(const std::vector<std::unique_ptr<layer>>& parts) {
  for (std::size_t j = parts.size(); j-- > 0;)
    if (auto out = parts[j]->out_features()) return out;
  return std::nullopt;
}

}  // namespace

block::block(std::vector<std::unique_ptr<layer>> parts, bool residual) : parts_(std::move(parts)), residual_(residual) {
  const std::string kind = residual_ ? "Residual" : "Block";
  if (parts_.empty()) throw std::invalid_argument(kind + " needs at least one part");
  for (const auto& p : parts_)
    if (!p) throw std::invalid_argument(kind + ": null part");
  // The last part that fixes a width sets it.
  std::optional<std::size_t> width;
  std::size_t set_by = 0;
  for (std::size_t i = 0; i < parts_.size(); ++i) {
    if (auto in = parts_[i]->in_features(); in && width && *in != *width)
      throw std::invalid_argument(kind + ": " + part_name(i, *parts_[i]) + " takes " + std::to_string(*in) +
                                  " features but " + part_name(set_by, *parts_[set_by]) + " gives " +
                                  std::to_string(*width));
    if (auto out = parts_[i]->out_features()) width = out, set_by = i;
  }
  const auto in = first_in(parts_), out = last_out(parts_);
  if (residual_ && in && out && *in != *out)
    throw std::invalid_argument("Residual: its parts map " + std::to_string(*in) + " features to " +
                                std::to_string(*out) + ", but x + f(x) needs f to keep the width");
}

block::block(const block& other)
    : layer(other), residual_(other.residual_), recompute_(other.recompute_), split_(other.split_) {
  for (const auto& p : other.parts_) parts_.push_back(p->clone());
}

std::string block::describe() const {
  std::string text = residual_ ? "Residual(" : "Block(";
  for (std::size_t i = 0; i < parts_.size(); ++i) text += (i ? " " : "") + parts_[i]->describe();
  return text + ")";
}

std::string block::spec() const {
  std::string text = residual_ ? "residual[" : "block[";
  for (std::size_t i = 0; i < parts_.size(); ++i) text += (i ? "," : "") + parts_[i]->spec();
  return text + "]";
}

// x + f(x): a residual's input and output widths are equal.
std::optional<std::size_t> block::in_features() const {
  if (auto in = first_in(parts_)) return in;
  return residual_ ? last_out(parts_) : std::nullopt;
}

std::optional<std::size_t> block::out_features() const {
  if (auto out = last_out(parts_)) return out;
  return residual_ ? first_in(parts_) : std::nullopt;
}

tensor block::forward_parts(const tensor& x, saved& s, const forward_context& ctx) const {
  s.parts.clear();
  s.parts.resize(parts_.size());
  tensor h = with_layer_named(0, *parts_[0], false, [&] { return parts_[0]->forward(x, s.parts[0], ctx); });
  for (std::size_t i = 1; i < parts_.size(); ++i) {
    round_to_compute_dtype(h, compute_dtype());  // between parts, as between layers (Note [compute dtype])
    h = with_layer_named(i, *parts_[i], false,
                         [&] { return parts_[i]->forward_owned(std::move(h), s.parts[i], ctx); });
  }
  return h;
}

tensor block::forward(const tensor& x, layer_cache& cache, const forward_context& ctx) const {
  if (!split_.group) return forward_rows(x, cache, ctx);
  check_float32(x, *this, "input");
  tensor h = split_.scatter ? forward_rows(sequence_shard(x, *split_.group, describe()), cache, ctx)
                            : forward_rows(x, cache, ctx);
  return split_.gather ? sequence_gather(h, *split_.group) : h;
}

tensor block::forward_rows(const tensor& x, layer_cache& cache, const forward_context& ctx) const {
  saved& s = cache.emplace<saved>();
  s.dys.clear();
  s.input_done = false;
  check_float32(x, *this, "input");  // a block can be called on its own: Note [errors name the layer]
  tensor h = forward_parts(x, s, ctx);
  if (recompute_ && ctx.training) {  // Note [recomputation]
    s.parts.clear();
    s.x = x;
    s.ctx = ctx;
    s.recompute = true;
  } else {
    s.x = tensor{};
    s.recompute = false;
  }
  if (!residual_) return h;
  if (shape_of(h) != shape_of(x))
    throw std::invalid_argument(describe() + ": its parts map an input of shape " + shape_string(x) + " to " +
                                shape_string(h) + ", but x + f(x) needs the same shape");
  float* ph = h.data();
  const float* px = x.data();
  add_into(ph, px, h.size());
  return h;
}

void block::backward_input(const tensor& dy, layer_cache& cache, tensor* dx) const {
  backward_parts(dy, cache, dx, /*with_weights=*/false);
}

// The rows' dy from a whole one, and the whole dx from the rows' (Note [sequence parallelism]).
const tensor& block::rows_of_dy(const tensor& dy, tensor& mine) const {
  if (!split_.gather) return dy;
  mine = sequence_shard(dy, *split_.group, describe());
  return mine;
}

void block::backward_parts(const tensor& dy, layer_cache& cache, tensor* dx, bool with_weights) const {
  if (!split_.group) return backward_rows(dy, cache, dx, with_weights);
  tensor mine;
  const tensor& d = rows_of_dy(dy, mine);
  tensor rows_dx;
  tensor* into = split_.scatter && dx ? &rows_dx : dx;
  if (with_weights)
    summing_partial([&] { backward_rows(d, cache, into, true); });
  else
    backward_rows(d, cache, into, false);
  if (into != dx) {
    const tensor whole = sequence_gather(rows_dx, *split_.group);
    accumulate_elementwise(*dx, whole.shape(), *this, [p = whole.data()](std::size_t i) { return p[i]; });
  }
}

void block::summing_partial(const std::function<void()>& work) const {
  std::vector<tensor*> grads;  // of the parts' unsplit parameters (the norms')
  std::function<void(layer&)> collect = [&](layer& l) {
    if (auto* b = dynamic_cast<block*>(&l)) {
      for (std::size_t i = 0; i < b->size(); ++i) collect(b->part(i));
    } else if (!dynamic_cast<tensor_parallel_layer*>(&l)) {
      for (parameter& p : l.parameters("")) grads.push_back(p.grad);
    }
  };
  for (const auto& p : parts_) collect(*p);
  std::vector<tensor> before;
  std::size_t total = 0;
  for (tensor* g : grads) before.push_back(*g), total += g->size();
  work();
  if (total == 0) return;
  tensor added = tensor::from_shape({total});
  float* a = added.data();
  for (std::size_t i = 0; i < grads.size(); ++i) {
    const float *now = grads[i]->data(), *was = before[i].data();
    for (std::size_t k = 0; k < grads[i]->size(); ++k) *a++ = now[k] - was[k];
  }
  split_.group->all_reduce(added).wait();
  a = added.data();
  for (std::size_t i = 0; i < grads.size(); ++i) {
    float* now = grads[i]->data();
    const float* was = before[i].data();
    for (std::size_t k = 0; k < grads[i]->size(); ++k) now[k] = was[k] + *a++;
  }
}

// Each part's fused backward (Note [overlapped backward]); inner dy's kept as backward_input keeps them.
void block::backward(const tensor& dy, layer_cache& cache, tensor* dx) {
  backward_parts(dy, cache, dx, /*with_weights=*/true);
}

void block::backward_rows(const tensor& dy, layer_cache& cache, tensor* dx, bool with_weights) const {
  saved& s = cache.get<saved>(*this);
  if (s.recompute) {  // the forward again, from the kept input, into fresh caches (Note [recomputation])
    forward_parts(s.x, s, s.ctx);
    s.x = tensor{};
    s.recompute = false;
  }
  // Part i's backward from its dy `d` into `below`: fused, or its input half only (Note [backward split]).
  const auto part_backward = [&](std::size_t i, const tensor& d, tensor* below) {
    with_layer_named(i, *parts_[i], false, [&] {
      if (with_weights)
        parts_[i]->backward(d, s.parts[i], below);
      else
        parts_[i]->backward_input(d, s.parts[i], below);
    });
  };
  const std::size_t n = parts_.size();
  if (s.parts.size() != n)
    throw std::invalid_argument(describe() + " backward: the cache holds " + std::to_string(s.parts.size()) +
                                " part caches for " + std::to_string(n) + " parts");
  check_float32(dy, *this, "dy");
  s.dys.resize(n - 1);
  const tensor* d = &dy;  // dy at part i's output
  for (std::size_t i = n; i-- > 1;) {
    tensor& below = s.dys[i - 1];
    below = tensor{};  // unset: part i accumulates into fresh zeros (Note [dx accumulates])
    part_backward(i, *d, &below);
    round_to_compute_dtype(below, compute_dtype());
    d = &below;
  }
  part_backward(0, *d, dx);
  if (residual_ && dx) {  // the skip path: dx += dy
    float* pdx = accumulate_into(*dx, shape_of(dy), *this);
    const float* pdy = dy.data();
    add_into(pdx, pdy, dy.size());
  }
  s.input_done = true;
}

void block::backward_weight(const tensor& dy, layer_cache& cache) {
  if (split_.group) {  // Note [sequence parallelism]
    tensor mine;
    const tensor& d = rows_of_dy(dy, mine);
    return summing_partial([&] { weights_of_rows(d, cache); });
  }
  weights_of_rows(dy, cache);
}

void block::weights_of_rows(const tensor& dy, layer_cache& cache) {
  saved& s = cache.get<saved>(*this);
  if (!s.input_done)
    throw std::invalid_argument(describe() + " backward_weight: run backward_input first (it stashes the inner dy's)");
  const std::size_t n = parts_.size();
  for (std::size_t i = 0; i < n; ++i)
    with_layer_named(i, *parts_[i], false, [&] { parts_[i]->backward_weight(i + 1 == n ? dy : s.dys[i], s.parts[i]); });
}

std::vector<parameter> block::parameters(const std::string& prefix) {
  std::vector<parameter> all;
  for (std::size_t i = 0; i < parts_.size(); ++i)
    for (parameter& p : parts_[i]->parameters(prefix + std::to_string(i) + ".")) all.push_back(std::move(p));
  return all;
}

void block::initialize(std::uint64_t seed) {
  for (std::size_t i = 0; i < parts_.size(); ++i) parts_[i]->initialize(hash_counters(seed, i));
}

void block::set_compute_dtype(dtype type) {
  layer::set_compute_dtype(type);
  for (auto& p : parts_) p->set_compute_dtype(type);
}

std::uint64_t block::derived_bytes() const {
  std::uint64_t sum = 0;
  for (const auto& p : parts_) sum += p->derived_bytes();
  return sum;
}

double block::flops_per_row() const {
  double sum = 0.0;
  for (const auto& p : parts_) sum += p->flops_per_row();
  return sum;
}

std::unique_ptr<layer> make_block(const layer_spec& spec, bool residual) {
  spec.expect_parts(residual ? "residual[SPEC,SPEC,...]" : "block[SPEC,SPEC,...]");
  std::vector<std::unique_ptr<layer>> parts;
  try {
    for (const std::string& p : spec.parts) parts.push_back(make_layer(p));
    return std::make_unique<block>(std::move(parts), residual);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument("in '" + spec.text + "': " + e.what());
  }
}

}  // namespace ap

#include "model/sequential.hpp"

#include <stdexcept>

#include "model/gpt_spec.hpp"
#include "model/layer_registry.hpp"
#include "model/spec_text.hpp"
#include "model/weight_tie.hpp"
#include "random/seeded_random.hpp"
#include "tensor/elementwise.hpp"

namespace ap {

namespace {

std::string layer_name(std::size_t global_index, const layer& l) {
  return "layer " + std::to_string(global_index) + " " + l.describe();
}

}  // namespace

sequential sequential::from_spec(const std::string& spec, const sequential_options& options) {
  if (is_gpt_spec(spec)) {
    sequential model = from_layer_specs(gpt_layer_specs(parse_gpt_spec(spec)));
    model.initialize(options.seed);
    return model;
  }
  const std::vector<std::string> fields = split_fields(spec, '-');
  if (fields.size() < 2)
    throw std::invalid_argument("bad model spec '" + spec + "': expected widths like 784-512-10");
  const std::string& act = options.activation;
  if (act != "relu" && act != "gelu" && act != "tanh" && act != "sigmoid")
    throw std::invalid_argument("unknown activation '" + act + "': expected relu, gelu, tanh or sigmoid");
  std::vector<std::size_t> widths;
  for (const std::string& f : fields) widths.push_back(parse_width(f, spec));
  sequential model;
  for (std::size_t i = 0; i + 1 < widths.size(); ++i) {
    if (i > 0) model.add(make_layer(act));
    model.add(make_layer("linear:" + std::to_string(widths[i]) + ":" + std::to_string(widths[i + 1])));
  }
  model.initialize(options.seed);
  return model;
}

sequential sequential::from_layer_specs(const std::vector<std::string>& specs, std::size_t first_index) {
  sequential model;
  model.first_index_ = first_index;
  for (const std::string& s : specs) model.add(make_layer(s));
  if (first_index == 0) weight_ties(model, /*whole=*/true);
  return model;
}

const char* recompute_mode_name(recompute_mode mode) { return mode == recompute_mode::blocks ? "blocks" : "none"; }

recompute_mode parse_recompute_mode(const std::string& text) {
  if (text == "none") return recompute_mode::none;
  if (text == "blocks") return recompute_mode::blocks;
  throw std::invalid_argument("unknown recompute mode '" + text + "': choose none or blocks");
}

std::optional<recompute_mode> recompute_mode_from_code(std::uint8_t code) {
  if (code > static_cast<std::uint8_t>(recompute_mode::blocks)) return std::nullopt;
  return static_cast<recompute_mode>(code);
}

void sequential::set_recompute(recompute_mode mode) {
  recompute_ = mode;
  for (auto& l : layers_) l->set_recompute(mode == recompute_mode::blocks);
}

void sequential::set_compute_dtype(dtype type) {
  dtype_ = type;
  for (auto& l : layers_) l->set_compute_dtype(type);
}

std::size_t stashed_bytes(const sequential_cache& cache) {
  std::size_t n = 0;
  for (const layer_cache& c : cache.layers) n += c.bytes();
  for (const tensor& d : cache.dys) n += d.byte_size();
  return n;
}

sequential& sequential::add(std::unique_ptr<layer> l) {
  if (!l) throw std::invalid_argument("sequential::add: null layer");
  l->set_compute_dtype(dtype_);
  l->set_recompute(recompute_ == recompute_mode::blocks);
  const auto in = l->in_features();
  if (in) {
    // The last layer that fixes a width sets it.
    for (std::size_t j = layers_.size(); j-- > 0;) {
      const auto out = layers_[j]->out_features();
      if (!out) continue;
      if (*out != *in)
        throw std::invalid_argument(layer_name(first_index_ + layers_.size(), *l) + " takes " +
                                    std::to_string(*in) + " features but " +
                                    layer_name(first_index_ + j, *layers_[j]) + " gives " + std::to_string(*out));
      break;
    }
  }
  layers_.push_back(std::move(l));
  return *this;
}

std::vector<std::string> sequential::layer_specs() const {
  std::vector<std::string> specs;
  for (const auto& l : layers_) specs.push_back(l->spec());
  return specs;
}

std::string sequential::describe() const {
  std::string text;
  for (const auto& l : layers_) text += (text.empty() ? "" : " ") + l->describe();
  return text;
}

std::optional<std::size_t> sequential::in_features() const {
  for (const auto& l : layers_)
    if (auto in = l->in_features()) return in;
  return std::nullopt;
}

std::optional<std::size_t> sequential::out_features() const {
  for (std::size_t j = layers_.size(); j-- > 0;)
    if (auto out = layers_[j]->out_features()) return out;
  return std::nullopt;
}

void sequential::check_input(const tensor& x) const {
  if (layers_.empty()) return;
  if (!(dtype_ == dtype::bfloat16 && x.type() == dtype::bfloat16))
    with_layer_named(first_index_, *layers_[0], true, [&] { check_float32(x, *layers_[0], "input"); });
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    const auto in = layers_[i]->in_features();
    if (!in && layers_[i]->out_features()) break;  // an embedding
    if (!in) continue;
    if (*in != cols(x))
      throw layer_error(std::to_string(first_index_ + i),
                        layers_[i]->describe() + " takes " + std::to_string(*in) + " features, got input of shape " +
                            shape_string(x),
                        true);
    break;  // add() already checked that the later widths chain
  }
}

tensor sequential::forward(const tensor& x, sequential_cache& cache, const forward_context& ctx) const {
  check_weights("forward");
  check_input(x);
  cache.layers.resize(layers_.size());  // a reused cache keeps each layer's buffers
  cache.dys.clear();
  if (layers_.empty()) return x;
  // Activations between layers are rounded to the compute dtype (Note [compute dtype]).
  const bool widen = x.type() != dtype::float32;
  tensor entry;
  if (widen) entry = entering_values(x, dtype_);
  tensor h = with_layer_named(first_index_, *layers_[0], true,
                              [&] { return layers_[0]->forward(widen ? entry : x, cache.layers[0], ctx); });
  for (std::size_t i = 1; i < layers_.size(); ++i) {
    round_to_compute_dtype(h, dtype_);
    h = with_layer_named(first_index_ + i, *layers_[i], true,
                         [&] { return layers_[i]->forward_owned(std::move(h), cache.layers[i], ctx); });
  }
  return h;
}

tensor sequential::forward(const tensor& x, const forward_context& ctx) const {
  // Each layer's cache is dropped as soon as the next layer has run.
  sequential_cache cache;
  return forward(x, cache, ctx);
}

namespace {

// dy enters from outside (the loss, the next stage): float32, or bfloat16 in a bfloat16 model.
void check_dy(const tensor& dy, const std::vector<std::unique_ptr<layer>>& layers, std::size_t first_index,
              dtype type) {
  if (layers.empty() || (type == dtype::bfloat16 && dy.type() == dtype::bfloat16)) return;
  const std::size_t last = layers.size() - 1;
  with_layer_named(first_index + last, *layers[last], true, [&] { check_float32(dy, *layers[last], "dy"); });
}

void check_cache(const sequential_cache& cache, std::size_t layers, const char* what) {
  if (cache.layers.size() != layers)
    throw std::invalid_argument(std::string(what) + ": the cache holds " + std::to_string(cache.layers.size()) +
                                " layer caches for a model of " + std::to_string(layers) +
                                " layers (no forward of this model ran into it, or it was already used)");
}

}  // namespace

// Note [caches go with their backward]: a layer's cache is freed as soon as its backward (or its W) is done,
// not with the whole cache at the end: a block's cache grows in its backward (its parts' dy's), so holding
// them all until the last layer raised the backward's peak well above the stash.
tensor sequential::backward(const tensor& dy, sequential_cache& cache, bool need_input_grad,
                            const std::function<void(layer&)>& layer_done) {
  check_cache(cache, layers_.size(), "backward");
  check_dy(dy, layers_, first_index_, dtype_);
  // The last layer reads dy in place (no copy of a large dy); later ones read d.
  tensor d;
  const tensor* current = &dy;
  if (dy.type() != dtype::float32 && !layers_.empty()) {
    d = entering_values(dy, dtype_);
    current = &d;
  }
  for (std::size_t i = layers_.size(); i-- > 0;) {
    tensor below;  // unset: Note [dx accumulates]
    with_layer_named(first_index_ + i, *layers_[i], true, [&] {
      layers_[i]->backward(*current, cache.layers[i], i == 0 && !need_input_grad ? nullptr : &below);
    });
    if (layer_done) layer_done(*layers_[i]);
    cache.layers[i].clear();  // Note [caches go with their backward]
    if (i > 0) round_to_compute_dtype(below, dtype_);
    d = std::move(below);
    current = &d;
  }
  // Taken before the cache is freed (dy may live in it). With no layers, dx is dy.
  tensor dx = !need_input_grad ? tensor::from_shape({0}) : current == &dy ? tensor(dy) : std::move(d);
  cache.layers.clear();
  cache.dys.clear();
  return dx;
}

tensor sequential::backward_input(const tensor& dy, sequential_cache& cache, bool need_input_grad) const {
  check_cache(cache, layers_.size(), "backward_input");
  check_dy(dy, layers_, first_index_, dtype_);
  cache.dys.assign(layers_.size(), tensor{});
  tensor d = dy.type() == dtype::float32 ? dy : entering_values(dy, dtype_);  // Note [compute dtype]
  for (std::size_t i = layers_.size(); i-- > 0;) {
    cache.dys[i] = std::move(d);  // d is reassigned below
    tensor below;
    with_layer_named(first_index_ + i, *layers_[i], true, [&] {
      layers_[i]->backward_input(cache.dys[i], cache.layers[i], i == 0 && !need_input_grad ? nullptr : &below);
    });
    if (i > 0) round_to_compute_dtype(below, dtype_);
    d = std::move(below);
  }
  return need_input_grad ? d : tensor::from_shape({0});
}

void sequential::backward_weight(sequential_cache& cache) {
  check_cache(cache, layers_.size(), "backward_weight");
  if (cache.dys.size() != layers_.size())
    throw std::invalid_argument("backward_weight: the cache holds no dy per layer (run backward_input first)");
  for (std::size_t i = layers_.size(); i-- > 0;) {
    with_layer_named(first_index_ + i, *layers_[i], true,
                     [&] { layers_[i]->backward_weight(cache.dys[i], cache.layers[i]); });
    cache.layers[i].clear();  // Note [caches go with their backward]
    cache.dys[i] = tensor();
  }
  cache.layers.clear();
  cache.dys.clear();
}

std::vector<parameter> sequential::parameters() {
  std::vector<parameter> all;
  for (std::size_t i = 0; i < layers_.size(); ++i)
    for (parameter& p : layers_[i]->parameters(std::to_string(first_index_ + i) + "."))
      all.push_back(std::move(p));
  return all;
}

std::size_t sequential::parameter_count() const {
  std::size_t count = 0;
  for (std::size_t i = 0; i < layers_.size(); ++i)
    for (const parameter& p : layers_[i]->parameters("")) count += p.value->size();
  return count;
}

void sequential::release_gradients() {
  for (const parameter& p : parameters()) *p.grad = tensor();
}

void sequential::release_weights() {
  if (weights_released_) return;
  for (const parameter& p : parameters()) {
    released_shapes_.push_back(p.value->shape());
    *p.value = tensor();
    *p.grad = tensor();
  }
  weights_released_ = true;
}

void sequential::with_weights() {
  if (!weights_released_) return;
  const std::vector<parameter> params = parameters();
  for (std::size_t i = 0; i < params.size(); ++i) *params[i].value = zeros(released_shapes_.at(i));
  released_shapes_.clear();
  weights_released_ = false;
  with_gradients();
}

void sequential::check_weights(const char* operation) const {
  if (weights_released_)
    throw std::logic_error(std::string("sequential::") + operation + ": the model's weights were let go "
                           "(release_weights); with_weights() first");
}

void sequential::with_gradients() {
  for (const parameter& p : parameters()) {
    if (p.grad->shape() == p.value->shape()) continue;
    *p.grad = tensor::from_shape(p.value->shape());
    p.grad->fill(0.0f);
  }
}

void sequential::zero_grad() {
  for (const parameter& p : parameters()) parallel_zero(p.grad->bytes(), p.grad->byte_size());  // +0.0
}

void sequential::initialize(std::uint64_t seed) {
  // The seed is hashed first, so seed 2's layer 0 differs from seed 1's layer 1. A tied layer draws its
  // owner's weights from its owner's seed (Note [tied weights]).
  for (std::size_t i = 0; i < layers_.size(); ++i)
    layers_[i]->initialize(mix64(mix64(seed) + layers_[i]->tied_to().value_or(first_index_ + i)));
}

sequential sequential::slice(std::size_t begin, std::size_t end) const {
  check_weights("slice");
  if (begin > end || end > layers_.size())
    throw std::out_of_range("slice [" + std::to_string(begin) + ", " + std::to_string(end) + ") of a model of " +
                            std::to_string(layers_.size()) + " layers");
  sequential part;
  part.first_index_ = first_index_ + begin;
  part.dtype_ = dtype_;  // each cloned layer keeps its own
  part.recompute_ = recompute_;
  for (std::size_t i = begin; i < end; ++i) part.layers_.push_back(layers_[i]->clone());
  part.with_gradients();  // a slice trains, even of a model that let its gradients go
  return part;
}

}  // namespace ap

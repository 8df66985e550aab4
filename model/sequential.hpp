// Sequential: an ordered list of layers, sliceable into contiguous ranges (stages and chunks).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "model/layer.hpp"
#include "model/layer_registry.hpp"

namespace ap {

// Everything one forward of a Sequential saved for one microbatch; owned by the caller.
struct sequential_cache {
  std::vector<layer_cache> layers;  // one per layer
  std::vector<tensor> dys;          // dys[i]: dy at layer i's output, from backward_input for backward_weight
};

// Which layers recompute their forward in the backward (Note [recomputation] in block.hpp); `blocks`: every block.
enum class recompute_mode : std::uint8_t { none = 0, blocks = 1 };
const char* recompute_mode_name(recompute_mode mode);  // "none", "blocks"
// Throws std::invalid_argument naming the text and the choices for anything else.
recompute_mode parse_recompute_mode(const std::string& text);
// The mode of a transmitted code; nullopt for an unknown one.
std::optional<recompute_mode> recompute_mode_from_code(std::uint8_t code);

struct sequential_options {
  std::string activation = "relu";  // between from_spec's Linear layers
  std::uint64_t seed = 1;
};

class sequential {
 public:
  sequential() = default;
  sequential(sequential&&) = default;
  sequential& operator=(sequential&&) = default;

  // "784-512-256-10": Linear layers with the activation between them; "gpt:...": a GPT (model/gpt_spec.hpp).
  static sequential from_spec(const std::string& spec, const sequential_options& options = {});
  // From layer spec() texts; `first_index`: the global index of the first layer.
  static sequential from_layer_specs(const std::vector<std::string>& specs, std::size_t first_index = 0);

// Appends a layer; refuses one whose input width does not chain, naming both layers.
  sequential& add(std::unique_ptr<layer> l);

  // Also for layers added later (Note [compute dtype]).
  void set_compute_dtype(dtype type);
  dtype compute_dtype() const { return dtype_; }
  // Note [recomputation]; also for blocks added later.
  void set_recompute(recompute_mode mode);
  recompute_mode recompute() const { return recompute_; }

  std::size_t size() const { return layers_.size(); }
  bool empty() const { return layers_.empty(); }
  layer& at(std::size_t i) { return *layers_.at(i); }
  const layer& at(std::size_t i) const { return *layers_.at(i); }
  // Global index of the first layer (non-zero for a slice).
  std::size_t first_index() const { return first_index_; }
  std::vector<std::string> layer_specs() const;
  std::string describe() const;  // "Linear(784->512) ReLU Linear(512->10)"
  // Widths of the chain where some layer fixes them.
  std::optional<std::size_t> in_features() const;
  std::optional<std::size_t> out_features() const;

  // Throws a layer_error naming the layer and x's dtype or shape when x cannot enter. Cheap, run up front.
  void check_input(const tensor& x) const;

  // Errors name the layer (Note [errors name the layer]).
  tensor forward(const tensor& x, sequential_cache& cache, const forward_context& ctx) const;
  tensor forward(const tensor& x, const forward_context& ctx = {false, 0, 0}) const;  // inference, no cache

  // dx; accumulates the parameter gradients, then frees the cache. need_input_grad false: returns an empty
  // tensor. `layer_done` is called per layer as soon as its gradients are done (last first), so a
  // data-parallel reduction can start early.
  tensor backward(const tensor& dy, sequential_cache& cache, bool need_input_grad = true,
                  const std::function<void(layer&)>& layer_done = {});
  // dx only (Note [backward split]), keeping each layer's dy in the cache ...
  tensor backward_input(const tensor& dy, sequential_cache& cache, bool need_input_grad = true) const;
  // ... for backward_weight, which then frees the cache.
  void backward_weight(sequential_cache& cache);

  std::vector<parameter> parameters();
  std::size_t parameter_count() const;
  void zero_grad();
  // Layer i seeded from seed and its global index: a slice initialises like the whole.
  void initialize(std::uint64_t seed);

  // Layers [begin, end) as a deep copy, keeping global parameter names.
  sequential slice(std::size_t begin, std::size_t end) const;
  sequential clone() const { return slice(0, size()); }
  // Lets every gradient go (each 0-d), for a model kept for its weights (Note [one copy of the gradients] in
  // actors/pipeline.cpp); with_gradients() gives zeroed ones back.
  void release_gradients();
  void with_gradients();
  // Lets every parameter go, keeping shapes (Note [weights on demand] in actors/pipeline.cpp); with_weights()
  // gives zeroed ones back. A released model refuses to slice, clone or run (std::logic_error).
  void release_weights();
  void with_weights();
  bool weights_released() const { return weights_released_; }

 private:
  void check_weights(const char* operation) const;
  std::vector<std::unique_ptr<layer>> layers_;
  std::size_t first_index_ = 0;
  dtype dtype_ = dtype::float32;
  recompute_mode recompute_ = recompute_mode::none;
  bool weights_released_ = false;
  std::vector<shape_t> released_shapes_;  // every parameter's, in parameters() order, while released
};

// Bytes held by one microbatch's cache.
std::size_t stashed_bytes(const sequential_cache& cache);

}  // namespace ap

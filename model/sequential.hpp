// Sequential: an ordered list of layers, sliceable into contiguous ranges (the pipeline's stages and chunks).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "model/layer.hpp"
#include "model/layer_registry.hpp"

namespace ap {

// Everything one forward of a Sequential saved, for one microbatch. Owned by the caller.
struct sequential_cache {
  std::vector<layer_cache> layers;  // one per layer
  std::vector<tensor> dys;          // dys[i] (rows, layer i's output width): dy at layer i's output, from
                                    // backward_input for backward_weight
};

// Which layers recompute their forward in the backward (Note [recomputation] in block.hpp); `blocks`: every block.
enum class recompute_mode : std::uint8_t { none = 0, blocks = 1 };
const char* recompute_mode_name(recompute_mode mode);  // "none", "blocks"
// "none" or "blocks"; throws std::invalid_argument naming the text and the choices otherwise.
recompute_mode parse_recompute_mode(const std::string& text);
// The mode of a code that travelled (stage_spec); nullopt for an unknown one.
std::optional<recompute_mode> recompute_mode_from_code(std::uint8_t code);

struct sequential_options {
  std::string activation = "relu";  // put between Linear layers by from_spec: relu, gelu, tanh, sigmoid
  std::uint64_t seed = 1;           // initialisation seed
};

class sequential {
 public:
  sequential() = default;
  sequential(sequential&&) = default;
  sequential& operator=(sequential&&) = default;

  // "784-512-256-10": Linear layers of those widths with the activation between them (not after the last);
  // "gpt:layers=8,dim=256,heads=8,context=128": a GPT (model/gpt_spec.hpp; the activation is not used).
  static sequential from_spec(const std::string& spec, const sequential_options& options = {});
  // Rebuilds a model from layer spec() texts; `first_index` is the global index of the first layer.
  static sequential from_layer_specs(const std::vector<std::string>& specs, std::size_t first_index = 0);

// Appends a layer; refuses one whose input width does not match the widths so far, naming both layers.
  sequential& add(std::unique_ptr<layer> l);

  // Sets every layer's compute dtype, also of layers added later (Note [compute dtype] in layer.hpp).
  void set_compute_dtype(dtype type);
  dtype compute_dtype() const { return dtype_; }
  // Note [recomputation] in block.hpp: with recompute_mode::blocks every block, also those added later, recomputes.
  void set_recompute(recompute_mode mode);
  recompute_mode recompute() const { return recompute_; }

  std::size_t size() const { return layers_.size(); }
  bool empty() const { return layers_.empty(); }
  layer& at(std::size_t i) { return *layers_.at(i); }
  const layer& at(std::size_t i) const { return *layers_.at(i); }
  // Global index of this model's first layer in the whole model (non-zero for a slice).
  std::size_t first_index() const { return first_index_; }
  std::vector<std::string> layer_specs() const;
  std::string describe() const;  // "Linear(784->512) ReLU Linear(512->10)"
  // Input / output widths of the whole chain where fixed by some layer.
  std::optional<std::size_t> in_features() const;
  std::optional<std::size_t> out_features() const;

  // Throws a layer_error (std::invalid_argument) when x cannot enter this model, naming the layer and x's
  // dtype or shape. Cheap: callers run it before any work starts.
  void check_input(const tensor& x) const;

  // Throws a layer_error naming the layer when x does not fit or a layer fails (Note [errors name the
  // layer] in layer.hpp).
  tensor forward(const tensor& x, sequential_cache& cache, const forward_context& ctx) const;
  tensor forward(const tensor& x, const forward_context& ctx = {false, 0, 0}) const;  // inference, no cache

  // dx; accumulates every parameter gradient, then frees the cache; errors name the layer. With
  // need_input_grad false the first layer's dx is skipped and an empty tensor returned. `layer_done` is called
  // with each layer as soon as its parameter gradients are done (last first), so a data-parallel reduction can
  // start while the layers below run.
  tensor backward(const tensor& dy, sequential_cache& cache, bool need_input_grad = true,
                  const std::function<void(layer&)>& layer_done = {});
  // Note [backward split] in layer.hpp: dx only, keeping each layer's dy in the cache ...
  tensor backward_input(const tensor& dy, sequential_cache& cache, bool need_input_grad = true) const;
  // ... for backward_weight, which accumulates the parameter gradients and then frees the cache.
  void backward_weight(sequential_cache& cache);

  std::vector<parameter> parameters();
  std::size_t parameter_count() const;
  void zero_grad();
  // Every layer seeded with seed + its global index: a slice initialises like the same layers of the whole.
  void initialize(std::uint64_t seed);

  // Layers [begin, end) as an independent deep copy (same weights), keeping global parameter names.
  sequential slice(std::size_t begin, std::size_t end) const;
  sequential clone() const { return slice(0, size()); }
  // Lets every gradient tensor go (each becomes 0-d), for a model kept for its weights while stages train copies
  // (Note [one copy of the gradients] in actors/pipeline.cpp); with_gradients() gives zeroed ones back.
  void release_gradients();
  void with_gradients();
  // Note [weights on demand] (actors/pipeline.cpp): lets every parameter go, keeping shapes and architecture;
  // with_weights() gives zeroed values and gradients back. A released model refuses to slice, clone or run
  // (std::logic_error).
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

// Bytes held by one microbatch's cache: every layer's stash and the dy's kept for backward_weight.
std::size_t stashed_bytes(const sequential_cache& cache);

}  // namespace ap

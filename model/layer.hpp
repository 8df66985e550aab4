// The layer interface, built for pipelining: a layer keeps no per-call state.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tensor/tensor.hpp"

namespace ap {

// A parameter as optimizers and checkpoints see it. Names are global ("3.weight": layer 3 of the whole
// model), so a checkpoint does not depend on how the model was split into stages.
struct parameter {
  std::string name;
  tensor* value;  // the weights
  tensor* grad;   // same shape; backward accumulates into it, zero_grad() clears it once per step
};

// Where in the training run a forward happens. Dropout draws its mask from (seed, step, sample, unit),
// so a pipeline and a single process drop the same units whatever the microbatch split.
struct forward_context {
  bool training = true;
  std::uint64_t step = 0;          // optimizer step number
  std::size_t first_sample = 0;    // index in the batch of this microbatch's first row
};

// What one forward call of one layer saved for its backward. Owned by the caller (a stage holds one
// per microbatch in flight), so many microbatches can be in flight and run backwards in any order.
struct layer_cache {
  std::vector<tensor> saved;  // layer-specific: e.g. Linear keeps its input x (rows, in)
};

// Note [backward split]: backward_input returns dx only; backward_weight accumulates parameter gradients
// only (zero-bubble schedules run it later). backward() is both. Both read the same cache and the same dy,
// and neither changes the cache, so they may run in either order.
class layer {
 public:
  virtual ~layer() = default;

  // "Linear(784->512)": used in error messages and model summaries.
  virtual std::string describe() const = 0;
  // Input / output feature widths, when the layer fixes them (Linear does, ReLU does not).
  virtual std::optional<std::size_t> in_features() const { return std::nullopt; }
  virtual std::optional<std::size_t> out_features() const { return std::nullopt; }

  virtual tensor forward(const tensor& x, layer_cache& cache, const forward_context& ctx) const = 0;
  virtual tensor backward_input(const tensor& dy, const layer_cache& cache) const = 0;
  virtual void backward_weight(const tensor& dy, const layer_cache& cache) {}
  tensor backward(const tensor& dy, const layer_cache& cache) {
    tensor dx = backward_input(dy, cache);
    backward_weight(dy, cache);
    return dx;
  }

  // Parameters named with `prefix` (the layer's global index, "3."). Empty for parameter-free layers.
  virtual std::vector<parameter> parameters(const std::string& prefix) { return {}; }
  // A deep copy: same weights, same gradients.
  virtual std::unique_ptr<layer> clone() const = 0;
  // A text that rebuilds the layer with make_layer() (weights not included): "linear:784:512".
  virtual std::string spec() const = 0;
  // Seeded initialisation; identical seeds give identical weights.
  virtual void initialize(std::uint64_t seed) {}
  // Forward FLOPs per row (for partitioning by cost); 0 for cheap element-wise layers.
  virtual double flops_per_row() const { return 0.0; }
};

// Builds one layer from its spec() text; throws std::invalid_argument naming the bad text.
std::unique_ptr<layer> make_layer(const std::string& spec);

}  // namespace ap

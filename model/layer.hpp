// The layer interface, built for pipelining: a layer keeps no per-call state.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <typeinfo>
#include <utility>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "tensor/compute.hpp"
#include "tensor/tensor.hpp"

namespace ap {

class layer;

// A parameter as optimizers and checkpoints see it, named globally ("3.weight", "3.1.weight").
struct parameter {
  std::string name;
  tensor* value;  // the weights
  tensor* grad;   // same shape; backward accumulates into it
};

// Where in the run a forward happens (Note [dropout mask]).
struct forward_context {
  bool training = true;
  std::uint64_t step = 0;          // optimizer step number
  std::size_t first_sample = 0;    // index in the batch of this microbatch's first row
};

// Note [typed caches]: what a forward saved for its backward is the layer's own struct `saved` (fields with
// shapes), held by the caller in a layer_cache per microbatch in flight, so backwards run in any order.
// get<saved>(*this) checks that a forward of this layer kind filled it.

// Note [joined caches]: the synchronous backward (Note [sync-backward] in schedule/schedule.hpp) runs once
// over the whole batch; join_rows builds from consecutive row ranges' states (this one first) what one
// forward over all rows would have saved. nullptr: this kind cannot join.
struct saved_state {
  virtual ~saved_state() = default;
  // Bytes of the tensors held (activation memory); pure virtual so no layer stashes uncounted.
  virtual std::size_t bytes() const = 0;
  virtual std::unique_ptr<saved_state> join_rows(const std::vector<const saved_state*>& parts) const {
    (void)parts;
    return nullptr;
  }
};

class layer_cache {
 public:
  // The layer's `saved` struct, reusing the one held (and its buffers) when of that type.
  template <class Saved>
  Saved& emplace() {
    if (!state_ || typeid(*state_) != typeid(Saved)) state_ = std::make_unique<Saved>();
    return static_cast<Saved&>(*state_);
  }
  // The `saved` struct a forward of `who` filled; throws std::invalid_argument naming `who` otherwise.
  template <class Saved>
  Saved& get(const layer& who) {
    if (!state_ || typeid(*state_) != typeid(Saved)) wrong_cache(who);
    return static_cast<Saved&>(*state_);
  }
  template <class Saved>
  const Saved& get(const layer& who) const {
    if (!state_ || typeid(*state_) != typeid(Saved)) wrong_cache(who);
    return static_cast<const Saved&>(*state_);
  }
  bool empty() const { return !state_; }
  void clear() { state_.reset(); }
  std::size_t bytes() const { return state_ ? state_->bytes() : 0; }
  // One cache over the rows of `parts`; nullopt when they differ in kind or cannot join.
  static std::optional<layer_cache> join(const std::vector<const layer_cache*>& parts);

 private:
  [[noreturn]] void wrong_cache(const layer& who) const;
  std::unique_ptr<saved_state> state_;
};

// A `Saved` whose listed tensor fields are the parts' fields stacked along the rows (Note [joined caches]).
template <class Saved>
std::unique_ptr<saved_state> join_row_fields(const std::vector<const saved_state*>& parts,
                                             std::initializer_list<tensor Saved::*> fields) {
  auto out = std::make_unique<Saved>();
  std::vector<const tensor*> column(parts.size());
  for (tensor Saved::*field : fields) {
    for (std::size_t i = 0; i < parts.size(); ++i) column[i] = &(static_cast<const Saved&>(*parts[i]).*field);
    (*out).*field = concat_rows(column);
  }
  return out;
}

// Note [dx accumulates]: backward_input adds into the caller's dx (`dx += ...`), so a value used twice (a
// residual's x) sums its gradients. An empty dx is first set to zeros (accumulate_into); a set one must have
// the input's shape. dx == nullptr: no input gradient wanted (a block still runs its parts' backward_input).

// Note [compute dtype]: training in bfloat16 (pipeline_options::compute_dtype), set by set_compute_dtype.
// Activations and input gradients between layers are rounded to bfloat16 values in float32 tensors, so a
// pipeline's cut rounds as one process does; Linear and attention multiply bfloat16 operands with float32
// accumulation; stashes are bfloat16 (half the memory). Master weights, gradients, optimizer, biases, norm
// statistics, element-wise math, the residual sum and the loss stay float32.

// Note [backward split]: backward_input accumulates dx only, backward_weight the parameter gradients only
// (zero-bubble schedules run it later); same dy and cache, backward_input first.
class layer {
 public:
  virtual ~layer() = default;

  // "Linear(784->512)", for error messages and summaries.
  virtual std::string describe() const = 0;
  // Input / output feature widths, when the layer fixes them (Linear does, ReLU does not).
  virtual std::optional<std::size_t> in_features() const { return std::nullopt; }
  virtual std::optional<std::size_t> out_features() const { return std::nullopt; }

  virtual tensor forward(const tensor& x, layer_cache& cache, const forward_context& ctx) const = 0;
  // Note [owned input]: forward of an input the caller gives up, whose buffer may become the stash.
  virtual tensor forward_owned(tensor&& x, layer_cache& cache, const forward_context& ctx) const {
    return forward(x, cache, ctx);
  }
  virtual void backward_input(const tensor& dy, layer_cache& cache, tensor* dx) const = 0;
  virtual void backward_weight(const tensor& dy, layer_cache& cache) {}
  // Note [recomputation] in model/block.hpp.
  virtual void set_recompute(bool on) {}
  virtual bool recomputes() const { return false; }
  // Both halves (Note [overlapped backward]). An override says `using layer::backward;`.
  virtual void backward(const tensor& dy, layer_cache& cache, tensor* dx) {
    backward_input(dy, cache, dx);
    backward_weight(dy, cache);
  }
  // The same with a fresh dx, for tests and one-off calls.
  tensor backward(const tensor& dy, layer_cache& cache) {
    tensor dx;
    backward(dy, cache, &dx);
    return dx;
  }

  // Parameters named with `prefix` ("3."); empty for parameter-free layers.
  virtual std::vector<parameter> parameters(const std::string& prefix) { return {}; }
  // A deep copy: same weights, same gradients.
  virtual std::unique_ptr<layer> clone() const = 0;
  // The text make_layer() rebuilds the layer from, weights excluded: "linear:784:512".
  virtual std::string spec() const = 0;
  // Seeded: identical seeds give identical weights.
  virtual void initialize(std::uint64_t seed) {}
  // The global index of the layer whose weight this one's is tied to (Note [tied weights]).
  virtual std::optional<std::size_t> tied_to() const { return std::nullopt; }

  // Note [compute dtype]; a composite passes it to its parts.
  dtype compute_dtype() const { return compute_dtype_; }
  virtual void set_compute_dtype(dtype type) { compute_dtype_ = type; }
  // Forward FLOPs per row (for partitioning by cost); 0 for cheap element-wise layers.
  virtual double flops_per_row() const { return 0.0; }
  // Bytes kept between steps derived from the parameters (a bfloat16 Linear's weight copy, Note [memory
  // model]). A clone makes its own.
  virtual std::uint64_t derived_bytes() const { return 0; }

 private:
  dtype compute_dtype_ = dtype::float32;
};

// Rounds a float32 tensor in place to the nearest values of `type` (Note [compute dtype]).
void round_to_compute_dtype(tensor& t, dtype type);
// A tensor entering a model computing in `type`: float32 holding values of `type`.
tensor entering_values(const tensor& t, dtype type);
// A stash of `x` in `type`, reusing `out`'s buffer.
inline void stash_as(tensor& out, const tensor& x, dtype type) { assign_as(out, x, type); }
// A float32 stash of `x`: `*owned` itself where the caller gave it up (Note [owned input]), else a copy.
inline void stash_input(tensor& out, const tensor& x, tensor* owned) {
  if (owned)
    out = std::move(*owned);
  else
    out = x;
}
// A stashed tensor as float32: itself if float32, else widened into `scratch`.
const tensor& float32_view(const tensor& stashed, tensor& scratch);

// The buffer of `dx` to add into (Note [dx accumulates]); throws std::invalid_argument naming `who` and both
// shapes on a mismatch. With `fresh`, an empty dx is left unzeroed and *fresh set: the caller writes with `=`.
float* accumulate_into(tensor& dx, const shape_t& shape, const layer& who, bool* fresh = nullptr);

// dx[i] += value(i) over `shape`, in parallel (Note [parallel element loops] in tensor/compute.hpp). `value`
// must capture by value ([=]), or the loop reloads through references and does not vectorise.
template <class Value>
void accumulate_elementwise(tensor& dx, const shape_t& shape, const layer& who, Value value) {
  bool fresh = false;
  float* out = accumulate_into(dx, shape, who, &fresh);
  const auto n = static_cast<std::ptrdiff_t>(dx.size());
  const auto share = [out, fresh](std::ptrdiff_t begin, std::ptrdiff_t end, Value v) {
    if (fresh)
      for (std::ptrdiff_t i = begin; i < end; ++i) out[i] = v(std::size_t(i));
    else
      for (std::ptrdiff_t i = begin; i < end; ++i) out[i] += v(std::size_t(i));
  };
#ifdef _OPENMP
  if (n >= parallel_elements && omp_get_max_threads() > 1) {
#pragma omp parallel
    {
      const std::ptrdiff_t t = omp_get_thread_num(), k = omp_get_num_threads();
      share(n * t / k, n * (t + 1) / k, value);
    }
    return;
  }
#endif
  share(0, n, value);
}

// dy must have the shape of what the forward saw; throws naming `who` and both shapes otherwise.
void check_dy_shape(const tensor& dy, const shape_t& expected, const layer& who);

// Note [errors name the layer]: errors read "layer 2 Linear(16->4) takes 16 features, got input of shape
// (8, 12)". A layer's text starts with its describe(); a block prefixes its part's path ("i"); Sequential makes
// it complete ("layer k.i"), which further Sequentials pass unchanged.
class layer_error : public std::invalid_argument {
 public:
  // path: "3.1" (complete: global) or "1" (a block's part); detail: the innermost layer's text.
  layer_error(std::string path, std::string detail, bool complete);
  const std::string& path() const { return path_; }
  const std::string& detail() const { return detail_; }
  bool complete() const { return complete_; }

 private:
  std::string path_, detail_;
  bool complete_;
};

// `what` prefixed with "Linear(4->3): " unless it already starts with who.describe().
std::string said_by(const layer& who, const std::string& what);

// Runs f(), rethrowing an error of layer `l` at `index` as a layer_error (Note [errors name the layer]).
template <class F>
decltype(auto) with_layer_named(std::size_t index, const layer& l, bool complete, F&& f) {
  try {
    return f();
  } catch (const layer_error& e) {
    if (e.complete()) throw;
    throw layer_error(std::to_string(index) + "." + e.path(), e.detail(), complete);
  } catch (const std::logic_error& e) {
    throw layer_error(std::to_string(index), said_by(l, e.what()), complete);
  } catch (const std::runtime_error& e) {
    throw layer_error(std::to_string(index), said_by(l, e.what()), complete);
  }
}

// Throws std::invalid_argument naming `who`, the role ("input", "dy"), dtype and shape when t is not float32
// (Note [tensor] in tensor.hpp). Called where tensors enter from outside.
void check_float32(const tensor& t, const layer& who, const char* role);

// Fills `t` with seeded normal(0, std) draws (Box-Muller over splitmix64).
void fill_normal(tensor& t, float std, std::uint64_t seed);

// Builds one layer from its spec() text (layer_registry.hpp); throws std::invalid_argument naming the text.
std::unique_ptr<layer> make_layer(const std::string& spec);

}  // namespace ap

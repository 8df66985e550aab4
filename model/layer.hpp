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

// A parameter as optimizers and checkpoints see it. Names are global ("3.weight": layer 3 of the whole
// model; "3.1.weight": sub-layer 1 of block 3), so a checkpoint does not depend on how the model was split
// into stages.
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

// Note [typed caches]: what one forward of one layer saved for its backward is the layer's own struct
// `saved`, derived from saved_state, with named fields and their shapes in comments (llm.c's
// ActivationTensors): `struct saved : saved_state { tensor x; // (rows, in) };`. The caller owns it inside a
// layer_cache (a stage holds one per microbatch in flight), so many microbatches can be in flight and run
// backwards in any order. The layer reaches it through cache.emplace<saved>() in forward and
// cache.get<saved>(*this) in backward, which checks that a forward of this layer kind filled it and says
// so otherwise. A holder rather than a `std::unique_ptr<saved_state>&` in every signature: a caller writes
// `layer_cache c;` without knowing the layer's type, and the checks live in one place.

// Note [joined caches]: the synchronous backward (Note [sync-backward] in schedule/schedule.hpp) runs one
// backward over the whole batch from the caches of its microbatches' forwards. join_rows builds, from the
// saved states of forwards over consecutive row ranges (`parts`, this one first, in row order), what one
// forward over all their rows would have saved: a layer whose saved fields are per-row tensors lists them
// (join_row_fields); nullptr says this kind cannot join, and the stage says so naming the layer.
struct saved_state {
  virtual ~saved_state() = default;
  // Bytes of the tensors it holds (activation memory: what a stage's peak_stash_bytes adds up, Note [compute
  // dtype]). Pure virtual, so no layer stashes uncounted: each `saved` sums its tensor fields' byte_size()
  // (0 for one that holds no tensor, saying so).
  virtual std::size_t bytes() const = 0;
  virtual std::unique_ptr<saved_state> join_rows(const std::vector<const saved_state*>& parts) const {
    (void)parts;
    return nullptr;
  }
};

class layer_cache {
 public:
  // The layer's `saved` struct, reusing the one already held (and its buffers) when it has that type.
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
  // One cache over the rows of `parts`, in order; an empty one when all are empty;
  // nullopt when they differ in kind or their kind cannot join (Note [joined caches]).
  static std::optional<layer_cache> join(const std::vector<const layer_cache*>& parts);

 private:
  [[noreturn]] void wrong_cache(const layer& who) const;
  std::unique_ptr<saved_state> state_;
};

// A `Saved` whose listed tensor fields are the parts' fields stacked along the rows
// (the leading axis), in order: `return join_row_fields<saved>(parts, {&saved::x});` (Note [joined caches]).
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

// Note [dx accumulates]: backward_input adds its input gradient into the caller's buffer (`dx += ...`, as
// llm.c's backward passes do), so a value used twice (a residual's x) sums its gradients with no special
// case: a block is its parts in order. An empty dx (default-constructed, or of size 0) is first set to
// zeros of the input's shape (accumulate_into); a set one must have that shape. dx == nullptr means the
// caller needs no input gradient (the model's first layer on the first stage): a plain layer then does
// nothing, a block still runs its parts' backward_input for what its backward_weight needs.

// Note [compute dtype]: how a model trains in bfloat16 (`train --dtype bf16`, pipeline_options::compute_dtype).
// A layer learns its compute dtype in one place, set_compute_dtype (sequential::set_compute_dtype calls it on every
// layer, a block on its parts; clones, slices and a node's stage_spec keep it). In bfloat16:
//   - what crosses a layer boundary is a bfloat16 value: Sequential (and a block) rounds every activation and
//     input gradient between layers (round_to_compute_dtype), in float32 tensors, so a layer that knows nothing
//     of dtypes still works, and a pipeline's cut rounds as the next layer would (pipeline == one process, bit
//     for bit: tests/test_pipeline_bf16.cpp). The model's input and the loss gradient enter as they are;
//   - Linear and attention multiply bfloat16 operands (and a bfloat16 copy of the weights, remade when they
//     change) with float32 accumulation and outputs (tensor/matmul.hpp);
//   - stashes are bfloat16 (Linear's x, the activations' y or x, LayerNorm's x, dropout's flags, attention's
//     q, k, v and probabilities): half the activation memory, lossless for values already bfloat16;
//   - float32 stays for the master weights, gradient accumulation, the optimizer and its state, biases,
//     LayerNorm's statistics, element-wise math, the residual sum and the loss on the model's float32 output.
// The output and dx a Sequential returns are not rounded here: a stage sends them to the next as bfloat16 (the
// same rounding), and the model's last output goes to the loss in float32.

// Note [backward split]: backward_input accumulates dx only; backward_weight accumulates the parameter
// gradients only (zero-bubble schedules run it later). backward() is both. Both get the same dy and the
// same cache. backward_input runs first: it may stash in the cache what backward_weight needs (a block
// keeps its inner dy's there, a bfloat16 Linear its rounded dy); a plain layer keeps nothing there that changes
// a result (the Linear's backward_weight rounds dy itself when it finds none), so for it either order works.
class layer {
 public:
  virtual ~layer() = default;

  // "Linear(784->512)": used in error messages and model summaries.
  virtual std::string describe() const = 0;
  // Input / output feature widths, when the layer fixes them (Linear does, ReLU does not).
  virtual std::optional<std::size_t> in_features() const { return std::nullopt; }
  virtual std::optional<std::size_t> out_features() const { return std::nullopt; }

  virtual tensor forward(const tensor& x, layer_cache& cache, const forward_context& ctx) const = 0;
  // Note [owned input]: forward of an input its caller gives up (Sequential and a block give every layer but
  // their first the activation they no longer need). A layer that keeps its input for the backward may keep
  // x's buffer instead of copying it; by default this is forward(x).
  virtual tensor forward_owned(tensor&& x, layer_cache& cache, const forward_context& ctx) const {
    return forward(x, cache, ctx);
  }
  virtual void backward_input(const tensor& dy, layer_cache& cache, tensor* dx) const = 0;
  virtual void backward_weight(const tensor& dy, layer_cache& cache) {}
  // Note [recomputation] in model/block.hpp: a block that recomputes keeps only its input from the forward
  // and runs its parts' forward again in the backward. Other layers keep what they keep.
  virtual void set_recompute(bool on) {}
  virtual bool recomputes() const { return false; }
  // Both halves (Note [overlapped backward] in model/parallel_linear.hpp: a layer whose backward_input waits
  // on a collective computes its weight gradients while the collective runs; same bits). A layer that
  // overrides it says `using layer::backward;` to keep the overload below.
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

  // Parameters named with `prefix` (the layer's global index, "3."). Empty for parameter-free layers.
  virtual std::vector<parameter> parameters(const std::string& prefix) { return {}; }
  // A deep copy: same weights, same gradients.
  virtual std::unique_ptr<layer> clone() const = 0;
  // A text that rebuilds the layer with make_layer() (weights not included): "linear:784:512".
  virtual std::string spec() const = 0;
  // Seeded initialisation; identical seeds give identical weights.
  virtual void initialize(std::uint64_t seed) {}
  // The global index of the layer whose weight this layer's weight is tied to, transposed (Note [tied weights]
  // in model/weight_tie.hpp); none for an untied layer. sequential::initialize gives a tied layer that layer's
  // seed, so the two start equal in any stage.
  virtual std::optional<std::size_t> tied_to() const { return std::nullopt; }

  // float32 (the default) or bfloat16. A composite passes it to its parts (Note [compute dtype]).
  dtype compute_dtype() const { return compute_dtype_; }
  virtual void set_compute_dtype(dtype type) { compute_dtype_ = type; }
  // Forward FLOPs per row (for partitioning by cost); 0 for cheap element-wise layers.
  virtual double flops_per_row() const { return 0.0; }
  // Bytes the layer keeps from step to step beside its parameters, made from them when it first runs in its compute
  // dtype (a bfloat16 Linear's rounded copy of its weights, Note [bf16 weights kept widened] in linear.cpp); a
  // composite's, its parts' (Note [memory model]). A copy of the layer does not take them: it makes its own.
  virtual std::uint64_t derived_bytes() const { return 0; }

 private:
  dtype compute_dtype_ = dtype::float32;
};

// Rounds every element of a float32 tensor to the nearest value of `type` (nothing for
// float32), in place (Note [compute dtype]).
void round_to_compute_dtype(tensor& t, dtype type);
// A tensor entering a model computing in `type`: float32 holding values of `type`. Takes float32 (rounded),
// or a bfloat16 tensor (widened, exactly) when `type` is bfloat16.
tensor entering_values(const tensor& t, dtype type);
// A stash for backward: `x` held in `type` (bfloat16 halves it), reusing `out`'s buffer.
inline void stash_as(tensor& out, const tensor& x, dtype type) { assign_as(out, x, type); }
// A float32 stash of the input `x`: `*owned` itself where the caller gave it up (Note [owned input]; then `x` is
// `*owned`), else a copy of `x` in `out`'s buffer.
inline void stash_input(tensor& out, const tensor& x, tensor* owned) {
  if (owned)
    out = std::move(*owned);
  else
    out = x;
}
// A stashed tensor as float32: itself if float32, else widened into `scratch`.
const tensor& float32_view(const tensor& stashed, tensor& scratch);

// The float buffer of `dx` to add into, after setting an empty dx to zeros of `shape`; throws std::invalid_argument
// naming `who` and both shapes when a set dx has another shape (Note [dx accumulates]).
// With `fresh` given, an empty dx is allocated without the zeros and *fresh says so: the caller then writes
// every element with `=` (a GEMM's beta 0), saving a pass over memory in the common case of a fresh dx.
float* accumulate_into(tensor& dx, const shape_t& shape, const layer& who, bool* fresh = nullptr);

// dx[i] += value(i) for every element of `shape`, written as dx[i] = value(i) when dx is fresh. Note
// [parallel element loops] in tensor/compute.hpp: on the calling rank's threads, each a contiguous share.
// Capture the pointers `value` reads by value ([=]): through references the compiler reloads them after
// every store to dx and runs a scalar, branching loop (ReLU's backward took 10 ms instead of 0.9).
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

// Note [errors name the layer]: an error a layer throws reaches the user as "layer 2 Linear(16->4) takes
// 16 features, got input of shape (8, 12)", naming the layer once by its global index as layer_name() does.
// A layer's own text starts with its describe() ("Linear(16->4) takes ..."); it knows no index. A block
// catches what its part i throws and rethrows a layer_error whose path is "i" (a block in a block makes it
// "i.j"); Sequential catches what layer k throws and rethrows a complete layer_error, "layer k" or
// "layer k.i" in front of the innermost layer's text. A complete error passes any further Sequential
// unchanged (and the stage worker adds the stage, chunk and microbatch in front).
class layer_error : public std::invalid_argument {
 public:
  // path: "3" or "3.1" (complete: global, from a Sequential) or "1" (a block's part, not yet global).
  // detail: the innermost layer's text, starting with its describe().
  layer_error(std::string path, std::string detail, bool complete);
  const std::string& path() const { return path_; }
  const std::string& detail() const { return detail_; }
  bool complete() const { return complete_; }

 private:
  std::string path_, detail_;
  bool complete_;
};

// The text of `what` as said by `who`: unchanged when it already starts with who.describe(), else
// "Linear(4->3): " + what.
std::string said_by(const layer& who, const std::string& what);

// Runs f() and returns what it returns, rethrowing an error from layer `l` at `index` as a layer_error
// (Note [errors name the layer]): complete for a Sequential's layer (index global), not for a block's part.
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

// Layers compute in float32 (Note [tensor] in tensor.hpp). Throws std::invalid_argument naming `who`, the
// role ("input", "dy") and the tensor's dtype and shape when t is not float32: "Linear(12->16) takes
// float32 input, got bfloat16 (8, 12)". Called where a tensor enters layers from outside: Sequential's
// forward and backward, and a block's (which can be called on its own); layers inside get float32 from the
// layer before them.
void check_float32(const tensor& t, const layer& who, const char* role);

// Fills `t` with draws of normal(0, std), seeded: the same seed gives the same values (Box-Muller over
// random/seeded_random.hpp's splitmix64, two draws a pair of values).
void fill_normal(tensor& t, float std, std::uint64_t seed);

// Builds one layer from its spec() text through the layer-kind registry (layer_registry.hpp); throws
// std::invalid_argument naming the bad text.
std::unique_ptr<layer> make_layer(const std::string& spec);

}  // namespace ap

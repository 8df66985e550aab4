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

// A parameter as optimizers and checkpoints see it. Names are global ("3.weight"; "3.1.weight": part 1 of
// block 3), so a checkpoint does not depend on the stage split.
struct parameter {
  std::string name;
  tensor* value;  // the weights
  tensor* grad;   // same shape; backward accumulates into it, zero_grad() clears it once per step
};

// Where in the run a forward happens; dropout's mask depends on it (Note [dropout mask]).
struct forward_context {
  bool training = true;
  std::uint64_t step = 0;          // optimizer step number
  std::size_t first_sample = 0;    // index in the batch of this microbatch's first row
};

// Note [typed caches]: what a forward saved for its backward is the layer's own struct `saved` (derived
// from saved_state, fields with shapes in comments), held by the caller in a layer_cache, one per
// microbatch in flight, so backwards run in any order. forward calls cache.emplace<saved>(), backward
// cache.get<saved>(*this), which checks that a forward of this layer kind filled it.

// Note [joined caches]: the synchronous backward (Note [sync-backward] in schedule/schedule.hpp) runs one
// backward over the whole batch. join_rows builds, from the saved states of consecutive row ranges (this
// one first), what one forward over all rows would have saved; nullptr: this kind cannot join.
struct saved_state {
  virtual ~saved_state() = default;
  // Bytes of the tensors held (activation memory, Note [compute dtype]). Pure virtual, so no layer stashes
  // uncounted.
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

// Note [dx accumulates]: backward_input adds its input gradient into the caller's buffer (`dx += ...`), so
// a value used twice (a residual's x) sums its gradients. An empty dx is first set to zeros of the input's
// shape (accumulate_into); a set one must have that shape. dx == nullptr: no input gradient is needed; a
// plain layer does nothing, a block still runs its parts' backward_input for its backward_weight.

// Note [compute dtype]: training in bfloat16 (pipeline_options::compute_dtype), set per layer by
// set_compute_dtype (a composite passes it to its parts). In bfloat16:
//   - every activation and input gradient between layers is rounded to bfloat16, kept in float32 tensors
//     (round_to_compute_dtype), so a pipeline's cut rounds as one process would;
//   - Linear and attention multiply bfloat16 operands with float32 accumulation (tensor/matmul.hpp);
//   - stashes are bfloat16: half the activation memory;
//   - float32 stays for master weights, gradients, the optimizer, biases, norm statistics, element-wise
//     math, the residual sum and the loss.
// A Sequential's own output and dx are not rounded: a stage sends them as bfloat16.

// Note [backward split]: backward_input accumulates dx only; backward_weight the parameter gradients only
// (zero-bubble schedules run it later). Both get the same dy and cache; backward_input runs first and may
// stash in the cache what backward_weight needs.
class layer {
 public:
  virtual ~layer() = default;

  // "Linear(784->512)": used in error messages and model summaries.
  virtual std::string describe() const = 0;
  // Input / output feature widths, when the layer fixes them (Linear does, ReLU does not).
  virtual std::optional<std::size_t> in_features() const { return std::nullopt; }
  virtual std::optional<std::size_t> out_features() const { return std::nullopt; }

  virtual tensor forward(const tensor& x, layer_cache& cache, const forward_context& ctx) const = 0;
  // Note [owned input]: forward of an input the caller gives up; a layer may keep x's buffer as its stash
  // instead of copying it. By default this is forward(x).
  virtual tensor forward_owned(tensor&& x, layer_cache& cache, const forward_context& ctx) const {
    return forward(x, cache, ctx);
  }
  virtual void backward_input(const tensor& dy, layer_cache& cache, tensor* dx) const = 0;
  virtual void backward_weight(const tensor& dy, layer_cache& cache) {}
  // Note [recomputation] in model/block.hpp.
  virtual void set_recompute(bool on) {}
  virtual bool recomputes() const { return false; }
  // Both halves (Note [overlapped backward] in model/parallel_linear.hpp). An override says
  // `using layer::backward;` to keep the overload below.
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
  // The global index of the layer whose weight this one's is tied to, transposed (Note [tied weights] in
  // model/weight_tie.hpp); none for an untied layer.
  virtual std::optional<std::size_t> tied_to() const { return std::nullopt; }

  // float32 (the default) or bfloat16. A composite passes it to its parts (Note [compute dtype]).
  dtype compute_dtype() const { return compute_dtype_; }
  virtual void set_compute_dtype(dtype type) { compute_dtype_ = type; }
  // Forward FLOPs per row (for partitioning by cost); 0 for cheap element-wise layers.
  virtual double flops_per_row() const { return 0.0; }
  // Bytes kept between steps beside the parameters, derived from them (a bfloat16 Linear's weight copy,
  // Note [bf16 weights kept widened] in linear.cpp; Note [memory model]). A clone makes its own.
  virtual std::uint64_t derived_bytes() const { return 0; }

 private:
  dtype compute_dtype_ = dtype::float32;
};

// Rounds a float32 tensor in place to the nearest values of `type` (Note [compute dtype]).
void round_to_compute_dtype(tensor& t, dtype type);
// A tensor entering a model computing in `type`: float32 holding values of `type` (bfloat16 input is widened).
tensor entering_values(const tensor& t, dtype type);
// A stash for backward: `x` held in `type` (bfloat16 halves it), reusing `out`'s buffer.
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

// The buffer of `dx` to add into, after setting an empty dx to zeros of `shape`; throws std::invalid_argument
// naming `who` and both shapes on a mismatch (Note [dx accumulates]). With `fresh`, an empty dx is left
// unzeroed and *fresh says so: the caller then writes every element with `=`.
float* accumulate_into(tensor& dx, const shape_t& shape, const layer& who, bool* fresh = nullptr);

// dx[i] += value(i) over `shape`, in parallel (Note [parallel element loops] in tensor/compute.hpp). Capture
// what `value` reads by value ([=]): through references the compiler reloads it after each store to dx and
// the loop does not vectorise.
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

// Note [errors name the layer]: an error reaches the user as "layer 2 Linear(16->4) takes 16 features, got
// input of shape (8, 12)". A layer's own text starts with its describe(); it knows no index. A block rethrows
// its part i's error as a layer_error with path "i"; Sequential rethrows layer k's as a complete one
// ("layer k" or "layer k.i"), which passes further Sequentials unchanged.
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
// role ("input", "dy"), dtype and shape otherwise. Called where tensors enter from outside (Sequential, a block).
void check_float32(const tensor& t, const layer& who, const char* role);

// Fills `t` with seeded normal(0, std) draws (Box-Muller over splitmix64).
void fill_normal(tensor& t, float std, std::uint64_t seed);

// Builds one layer from its spec() text through the layer-kind registry (layer_registry.hpp); throws
// std::invalid_argument naming the bad text.
std::unique_ptr<layer> make_layer(const std::string& spec);

}  // namespace ap

// Blocks: parts run in order, y = f(x); a residual block adds its input, y = x + f(x). A block is one layer
// to everything above it (one unit of partitioning, one spec text, parameters "3.1.weight"). The residual's
// backward: parts[0] adds f's dx and the block adds dy into the same dx (Note [dx accumulates]).
// Recomputation (activation checkpointing, Note [recomputation]) trades one more forward for the stash, with
// bit-identical gradients (ops are deterministic, dropout masks hashes). The sync backward cannot join
// recomputing blocks.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "collective/process_group.hpp"
#include "model/layer.hpp"
#include "model/layer_spec.hpp"

namespace ap {

class block final : public layer {
 public:
  // Throws std::invalid_argument, naming parts and widths, for no parts, unchained widths, or a residual
  // whose f changes the width.
  block(std::vector<std::unique_ptr<layer>> parts, bool residual);
  block(const block& other);  // deep copy of the parts

  struct saved : saved_state {
    // Note [recomputation]: while a recomputing block waits for its backward, only x and ctx are kept; the
    // backward refills parts by running the forward again.
    tensor x;                        // kept only when recomputing
    forward_context ctx;             // for the same dropout masks
    bool recompute = false;          // parts must be refilled first
    std::vector<layer_cache> parts;  // one per part, in order
    std::vector<tensor> dys;         // dys[i]: dy at part i's output for i < n - 1, from backward_input
    bool input_done = false;         // dys are valid
    std::size_t bytes() const override {
      std::size_t n = x.byte_size();
      for (const layer_cache& p : parts) n += p.bytes();
      for (const tensor& d : dys) n += d.byte_size();
      return n;
    }
    // Before any backward_input (Note [joined caches]).
    std::unique_ptr<saved_state> join_rows(const std::vector<const saved_state*>& parts_saved) const override {
      if (recompute) return nullptr;
      auto out = std::make_unique<saved>();
      for (std::size_t i = 0; i < parts.size(); ++i) {
        std::vector<const layer_cache*> column;
        for (const saved_state* p : parts_saved) column.push_back(&static_cast<const saved&>(*p).parts.at(i));
        std::optional<layer_cache> joined = layer_cache::join(column);
        if (!joined) return nullptr;
        out->parts.push_back(std::move(*joined));
      }
      return out;
    }
  };
  tensor forward(const tensor& x, layer_cache& cache, const forward_context& ctx) const override;
  void backward_input(const tensor& dy, layer_cache& cache, tensor* dx) const override;
  void backward_weight(const tensor& dy, layer_cache& cache) override;
  using layer::backward;
  void backward(const tensor& dy, layer_cache& cache, tensor* dx) override;

  std::string describe() const override;  // "Residual(LayerNorm(64) Linear(64->256) GELU Linear(256->64))"
  std::optional<std::size_t> in_features() const override;
  std::optional<std::size_t> out_features() const override;
  std::vector<parameter> parameters(const std::string& prefix) override;
  std::unique_ptr<layer> clone() const override { return std::make_unique<block>(*this); }
  std::string spec() const override;
  void initialize(std::uint64_t seed) override;
  double flops_per_row() const override;
  void set_compute_dtype(dtype type) override;  // its own and every part's
  std::uint64_t derived_bytes() const override;  // its parts'
  void set_recompute(bool on) override { recompute_ = on; }  // Note [recomputation]
  bool recomputes() const override { return recompute_; }

  // The block runs on `group`'s rows and sums its norms' gradients over it (Note [sequence parallelism]).
  struct sequence_split {
    std::shared_ptr<process_group> group;  // null: whole rows
    bool scatter = false;                  // take this rank's rows of a whole input (a run's first block)
    bool gather = false;                   // all-gather the output (a run's last block)
  };
  void set_sequence_split(sequence_split split) { split_ = std::move(split); }

  bool residual() const { return residual_; }
  std::size_t size() const { return parts_.size(); }
  const layer& part(std::size_t i) const { return *parts_.at(i); }
  layer& part(std::size_t i) { return *parts_.at(i); }

 private:
  // backward_input (with_weights false) or the fused backward of every part, last to first.
  void backward_parts(const tensor& dy, layer_cache& cache, tensor* dx, bool with_weights) const;
  // The parts' forward from x into s.parts: f(x), before the residual.
  tensor forward_parts(const tensor& x, saved& s, const forward_context& ctx) const;
  // forward and backward_parts on the rows the block holds.
  tensor forward_rows(const tensor& x, layer_cache& cache, const forward_context& ctx) const;
  void backward_rows(const tensor& dy, layer_cache& cache, tensor* dx, bool with_weights) const;
  void weights_of_rows(const tensor& dy, layer_cache& cache);
  // With a sequence split, this rank's rows of a whole dy, copied into `mine`; else dy.
  const tensor& rows_of_dy(const tensor& dy, tensor& mine) const;
  // Runs `work`, then sums over the group what it added to the unsplit parameters' gradients.
  void summing_partial(const std::function<void()>& work) const;

  std::vector<std::unique_ptr<layer>> parts_;
  bool residual_;
  bool recompute_ = false;  // Note [recomputation]
  sequence_split split_;
};

// The factory of "block" and "residual"; errors name the block's text and the part's.
std::unique_ptr<layer> make_block(const layer_spec& spec, bool residual);

}  // namespace ap

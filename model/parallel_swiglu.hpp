// The SwiGLU MLP with its hidden units split over tensor-parallel ranks.
#pragma once

#include <memory>

#include "model/parallel_linear.hpp"
#include "model/swiglu.hpp"

namespace ap {

// Note [tensor-parallel SwiGLU]: silu(gate) * up is element-wise in the hidden units, so rank r of T takes
// hidden shard r (T divides H): its gate and up columns (a column_parallel_linear of 2 blocks), the gated
// product, and its rows of the down projection (a row_parallel_linear). Unsplit it equals "swiglu_mlp:D:H".
class parallel_swiglu_mlp final : public layer, public tensor_parallel_layer {
 public:
  parallel_swiglu_mlp(std::size_t dim, std::size_t hidden, swiglu_init init = {});

  std::string describe() const override;  // "ParallelSwiGLU(64->176->64) rank 1 of 2"
  std::optional<std::size_t> in_features() const override { return dim_; }
  std::optional<std::size_t> out_features() const override { return dim_; }

  // Shapes: h = the hidden units this rank holds.
  struct saved : saved_state {
    layer_cache gate_up;  // input x (rows, D), whole
    tensor a;             // (rows, 2h): gate and up columns; bfloat16 in a bfloat16 layer
    layer_cache down;     // input: (rows, h)
    tensor da;            // (rows, 2h): from backward_input, for backward_weight
    bool input_done = false;
    std::size_t bytes() const override { return gate_up.bytes() + a.byte_size() + down.bytes() + da.byte_size(); }
  };
  tensor forward(const tensor& x, layer_cache& cache, const forward_context& ctx) const override;
  tensor forward_owned(tensor&& x, layer_cache& cache, const forward_context& ctx) const override;
  void backward_input(const tensor& dy, layer_cache& cache, tensor* dx) const override;
  void backward_weight(const tensor& dy, layer_cache& cache) override;
  using layer::backward;
  // Note [overlapped backward], over both projections' weight gradients.
  void backward(const tensor& dy, layer_cache& cache, tensor* dx) override;

  std::vector<parameter> parameters(const std::string& prefix) override;
  std::unique_ptr<layer> clone() const override { return std::make_unique<parallel_swiglu_mlp>(*this); }
  std::string spec() const override;  // "parallel_swiglu_mlp:64:176"
  void initialize(std::uint64_t seed) override;  // as swiglu_mlp, then this rank's slices
  void set_compute_dtype(dtype type) override;
  double flops_per_row() const override { return 6.0 * double(dim_) * double(hidden_); }  // global

  // Refuses a T not dividing the hidden width, naming the layer, width, T and group.
  void join_group(std::shared_ptr<process_group> group) override;
  std::vector<sharded_value> sharded_values() const override;
  // Takes and gives this rank's rows (Note [sequence parallelism]). After join_group.
  void set_sequence_parallel(bool on) {
    gate_up_.set_sequence_parallel(on);
    down_.set_sequence_parallel(on);
  }

 private:
  saved& start_forward(const tensor& x, layer_cache& cache) const;
  tensor gated_and_down(tensor a, saved& s, const forward_context& ctx) const;
  column_parallel_linear::pending_dx start_backward_input(const tensor& dy, layer_cache& cache, tensor* dx) const;

  std::size_t dim_, hidden_;
  swiglu_init init_;
  std::shared_ptr<process_group> group_;  // null: not split
  column_parallel_linear gate_up_;  // D -> 2H in 2 blocks (gate, up)
  row_parallel_linear down_;        // H -> D; bias whole
};

}  // namespace ap

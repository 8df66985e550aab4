// Tensor-parallel Linear layers (Megatron's ColumnParallelLinear and RowParallelLinear).
#pragma once

#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "collective/process_group.hpp"
#include "model/layer.hpp"
#include "model/layer_spec.hpp"

namespace ap {

// Note [tensor-parallel layers]: a parallel layer's spec names the global layer ("column_linear:256:1024");
// unsplit it computes exactly what that Linear computes, and join_group (rank r of T) keeps only its shard.
// A column -> element-wise -> row pair needs one all-reduce forward and one backward, and its input, output
// and dx are whole on every rank. join_group refuses a T not dividing the width, naming both.

// Note [overlapped backward]: the column layer's partial dx is not needed at once and its weight gradient
// needs only local values, so the fused backward (layer::backward) starts the all-reduce, computes the weight
// gradients while the group sums, then waits and adds the sum into dx. Same bits as the two halves in turn.

// Note [shard blocks]: a fused weight is blocks side by side (attention's q, k, v columns), and a rank needs
// its shard of every block. A shard_layout cuts the axis into `blocks` blocks (equal, or of `lengths`), each
// split over the ranks as shard_rows does; rank r holds its part of each, in block order. Checkpoints hold
// the unsplit layout, so a run saved at any T loads at any other.
struct shard_layout {
  int axis = 0;            // 0: rows (or a vector's elements), 1: columns; -1: whole (not sharded)
  std::size_t blocks = 1;  // blocks the axis is made of, each split over the ranks
  std::vector<std::size_t> lengths;  // each block's length along the axis when they differ; empty: equal blocks
  // Implicit from an axis alone (one block).
  shard_layout(int along = 0, std::size_t block_count = 1) : axis(along), blocks(block_count) {}
  // Blocks of these lengths (equal ones kept as a count, so both spellings compare equal).
  shard_layout(int along, const std::vector<std::size_t>& block_lengths);
  bool operator==(const shard_layout& o) const { return axis == o.axis && blocks == o.blocks && lengths == o.lengths; }
};

class tensor_parallel_layer {
 public:
  virtual ~tensor_parallel_layer() = default;
  virtual void join_group(std::shared_ptr<process_group> group) = 0;
  // The parameter values this rank holds a slice of, with their cut; the others are whole on every rank.
  struct sharded_value {
    const tensor* value;
    shard_layout layout;
  };
  virtual std::vector<sharded_value> sharded_values() const = 0;
};

// y = x W + b with W's output columns split: rank r holds shard r of the columns (of each block, Note [shard
// blocks]; unequal widths spelled "column_linear:16:32:16+8+8"). backward_input all-reduces the partial dx.
// As an LM head (":vocab=1", Note [vocab-parallel]) its outputs are the rank's vocabulary shard.
struct head_options {
  bool vocabulary = false;           // ":vocab=1"
  std::optional<std::size_t> tie;    // ":tie=I"
};
class column_parallel_linear final : public layer, public tensor_parallel_layer {
 public:
  // `init`: Linear's options (Note [layer options] in model/layer_spec.hpp).
  column_parallel_linear(std::size_t in, std::size_t out, std::size_t blocks = 1, init_options init = {},
                         head_options head = {});
  column_parallel_linear(std::size_t in, const std::vector<std::size_t>& block_widths, init_options init = {});

  std::string describe() const override;
  std::optional<std::size_t> in_features() const override { return in_; }
  std::optional<std::size_t> out_features() const override { return out_; }  // global: before splitting

  struct saved : saved_state {
    tensor x;  // (rows, in): whole, for dweight = x^T dy
    std::size_t bytes() const override { return x.byte_size(); }
    std::unique_ptr<saved_state> join_rows(const std::vector<const saved_state*>& parts) const override {
      return join_row_fields<saved>(parts, {&saved::x});
    }
  };
  tensor forward(const tensor& x, layer_cache& cache, const forward_context& ctx) const override;
  tensor forward_owned(tensor&& x, layer_cache& cache, const forward_context& ctx) const override;
  void backward_input(const tensor& dy, layer_cache& cache, tensor* dx) const override;
  void backward_weight(const tensor& dy, layer_cache& cache) override;
  using layer::backward;
  void backward(const tensor& dy, layer_cache& cache, tensor* dx) override;  // Note [overlapped backward]

  // backward_input in two halves (Note [overlapped backward]): start() leaves the partial dx summing;
  // finish() waits and adds the sum into dx.
  struct pending_dx {
    tensor partial;  // (rows, in): this rank's partial dx, summed in place by the group
    collective_handle sum;
    tensor* dx = nullptr;
    tensor rows;           // on sequence shards: this rank's rows of the sum, of shape `shape`
    shape_t shape;
    pending_dx() = default;
    pending_dx(pending_dx&& other) noexcept
        : partial(std::move(other.partial)), sum(std::move(other.sum)), dx(std::exchange(other.dx, nullptr)),
          rows(std::move(other.rows)), shape(std::move(other.shape)) {}
    pending_dx& operator=(pending_dx&&) = delete;
    // Waits for a sum still in flight, which writes into `partial` (Note [async collectives]).
    ~pending_dx();
  };
  pending_dx start_backward_input(const tensor& dy, layer_cache& cache, tensor* dx) const;
  void finish_backward_input(pending_dx& pending) const;

  std::vector<parameter> parameters(const std::string& prefix) override;
  std::unique_ptr<layer> clone() const override { return std::make_unique<column_parallel_linear>(*this); }
  std::string spec() const override;
  void initialize(std::uint64_t seed) override;
  double flops_per_row() const override { return 2.0 * double(in_) * double(out_); }
  std::optional<std::size_t> tied_to() const override { return head_.tie; }
  // The first output column this rank holds (0 until it joins a group).
  std::size_t first_column() const { return held_.front().first; }
  void join_group(std::shared_ptr<process_group> group) override;
  // Input all-gathered, dx reduce-scattered (Note [sequence parallelism]). After join_group; not for a head.
  void set_sequence_parallel(bool on);
  std::vector<sharded_value> sharded_values() const override {
    if (!group_) return {};
    if (!init_.bias) return {{&weight_, {1, widths_}}};
    return {{&weight_, {1, widths_}}, {&bias_, {0, widths_}}};
  }

 private:
  tensor forward_keeping(const tensor& x, tensor* owned, layer_cache& cache) const;
  std::size_t width() const;  // the output columns this rank holds
  std::size_t in_, out_;
  std::vector<std::size_t> widths_;  // the blocks' widths, summing to out_
  init_options init_;
  head_options head_;
  std::vector<std::pair<std::size_t, std::size_t>> held_;  // the columns this rank holds of each block: [first, last)
  std::shared_ptr<process_group> group_;  // null: not split
  bool sequence_ = false;                 // Note [sequence parallelism]
  tensor weight_;   // (in, width)
  tensor bias_;     // (width)
  tensor dweight_;  // (in, width)
  tensor dbias_;    // (width)
};

// y = x W + b with W's input rows split: rank r takes shard r of x's columns and all-reduces its partial x W
// before adding the bias, which every rank holds whole.
class row_parallel_linear final : public layer, public tensor_parallel_layer {
 public:
  row_parallel_linear(std::size_t in, std::size_t out, init_options init = {});

  std::string describe() const override;
  std::optional<std::size_t> in_features() const override { return in_; }  // global: before splitting
  std::optional<std::size_t> out_features() const override { return out_; }

  struct saved : saved_state {
    tensor x;   // (rows, last - first): this rank's shard of the input
    std::optional<tensor> dy;  // on sequence shards: every row's dy, gathered by backward_input for backward_weight
    std::size_t bytes() const override { return x.byte_size() + (dy ? dy->byte_size() : 0); }
    std::unique_ptr<saved_state> join_rows(const std::vector<const saved_state*>& parts) const override {
      return join_row_fields<saved>(parts, {&saved::x});
    }
  };
  tensor forward(const tensor& x, layer_cache& cache, const forward_context& ctx) const override;
  tensor forward_owned(tensor&& x, layer_cache& cache, const forward_context& ctx) const override;
  void backward_input(const tensor& dy, layer_cache& cache, tensor* dx) const override;
  void backward_weight(const tensor& dy, layer_cache& cache) override;

  std::vector<parameter> parameters(const std::string& prefix) override;
  std::unique_ptr<layer> clone() const override { return std::make_unique<row_parallel_linear>(*this); }
  std::string spec() const override;
  void initialize(std::uint64_t seed) override;
  double flops_per_row() const override { return 2.0 * double(in_) * double(out_); }
  void join_group(std::shared_ptr<process_group> group) override;
  std::vector<sharded_value> sharded_values() const override {
    return group_ ? std::vector<sharded_value>{{&weight_, {0}}} : std::vector<sharded_value>{};
  }
  // Output reduce-scattered (before the bias), dy all-gathered (Note [sequence parallelism]). After join_group.
  void set_sequence_parallel(bool on);
  // This rank's output shape for a whole output `whole`: its rows on sequence shards.
  shape_t output_shape(const shape_t& whole) const;

 private:
  tensor forward_keeping(const tensor& x, tensor* owned, layer_cache& cache) const;
  std::size_t in_, out_;
  init_options init_;
  std::size_t first_ = 0, last_;  // the input rows of W (columns of x) this rank holds: [first_, last_)
  std::shared_ptr<process_group> group_;  // null: not split
  bool sequence_ = false;                 // Note [sequence parallelism]
  const tensor& whole_dy(const tensor& dy, saved& s) const;  // dy of every row: gathered, or kept by backward_input
  tensor weight_;   // (last - first, out)
  tensor bias_;     // (out): whole on every rank
  tensor dweight_;  // (last - first, out)
  tensor dbias_;    // (out)
};

}  // namespace ap

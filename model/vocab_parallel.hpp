// The vocabulary split over tensor-parallel ranks (Megatron's VocabParallelEmbedding and vocab-parallel
// cross-entropy): a language model's embedding table, LM head and loss, each rank holding a share of the tokens.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "collective/process_group.hpp"
#include "model/loss.hpp"
#include "model/parallel_linear.hpp"

namespace ap {

// Note [vocab-parallel]: at a large vocabulary the embedding, LM head and logits outweigh a small model's
// blocks. With tensor-parallel degree T, rank r holds the tokens shard_rows(V, T, r) (T need not divide V) of:
// - the embedding ("vocab_embedding:V:D"): rows of tokens held elsewhere are zeros; one all-reduce of the
//   (rows, D) output makes it whole;
// - the LM head ("column_linear:D:V:vocab=1"): its output is the rank's logits (rows, V_r), never gathered;
// - the loss (vocab_parallel_cross_entropy): max, sum and the target's logit from one all-reduce of 2T + 1
//   numbers a row; each rank's gradient is its columns of softmax - onehot.
// A tied head and embedding hold the same tokens. The loss moves into the last stage (Note [loss in the last
// stage] in stage/stage_compute.hpp), so this applies to cross-entropy only.
class vocab_parallel_embedding final : public layer, public tensor_parallel_layer {
 public:
  vocab_parallel_embedding(std::size_t vocabulary, std::size_t dim, float std = 0.0f);

  std::string describe() const override;  // "VocabParallelEmbedding(50257x768) rank 0 of 2"
  std::optional<std::size_t> out_features() const override { return dim_; }

  struct saved : saved_state {
    tensor ids;
    std::size_t bytes() const override { return ids.byte_size(); }
  };
  tensor forward(const tensor& x, layer_cache& cache, const forward_context& ctx) const override;
  void backward_input(const tensor& dy, layer_cache& cache, tensor* dx) const override;
  void backward_weight(const tensor& dy, layer_cache& cache) override;

  std::vector<parameter> parameters(const std::string& prefix) override;
  std::unique_ptr<layer> clone() const override { return std::make_unique<vocab_parallel_embedding>(*this); }
  std::string spec() const override;  // "vocab_embedding:50257:768"
  void initialize(std::uint64_t seed) override;  // the embedding's table of this seed, this rank's rows
  void join_group(std::shared_ptr<process_group> group) override;
  std::vector<sharded_value> sharded_values() const override {
    return group_ ? std::vector<sharded_value>{{&weight_, {0}}} : std::vector<sharded_value>{};
  }

 private:
  std::size_t vocabulary_, dim_;
  float std_;
  std::size_t first_ = 0;                 // the first token this rank holds
  std::shared_ptr<process_group> group_;  // null: not split
  tensor weight_;   // (held tokens, dim)
  tensor dweight_;
};

// Cross-entropy from this rank's logit columns [first_class, first_class + V_r) (the group holds the rest):
// returns the loss (equal on every rank) and this rank's gradient columns, written over `logits`, scaled per
// Note [loss scaling]. Throws std::invalid_argument for a label out of range, std::domain_error for a NaN.
loss::loss_and_gradient vocab_parallel_cross_entropy(tensor&& logits, std::size_t first_class, std::size_t classes,
                                                     const tensor& labels, std::size_t batch_size, process_group& group);

// Whether these specs, loss and T split the vocabulary: T > 1, cross-entropy, first layer an embedding of V
// tokens and last a Linear to V outputs, V >= T.
bool splits_vocabulary(const std::vector<std::string>& specs, const std::string& loss, int tensor_parallel);

}  // namespace ap

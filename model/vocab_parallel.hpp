// The vocabulary split over tensor-parallel ranks (Megatron's VocabParallelEmbedding and cross-entropy).
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
// blocks. Rank r of T holds the tokens shard_rows(V, T, r) of the embedding (other tokens' rows are zeros,
// one all-reduce makes the output whole), the LM head ("column_linear:D:V:vocab=1": the rank's logits, never
// gathered) and the loss (vocab_parallel_cross_entropy). The loss runs in the last stage (Note [loss in the
// last stage] in stage/stage_compute.hpp), so this applies to cross-entropy only.
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
  void initialize(std::uint64_t seed) override;  // the whole table of this seed, this rank's rows
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

// Cross-entropy from this rank's logit columns [first_class, first_class + V_r): max, sum and the target's
// logit from one all-reduce of 2T + 1 numbers a row. Returns the loss (equal on every rank) and this rank's
// gradient columns, written over `logits` (Note [loss scaling]). Throws std::invalid_argument for a bad
// label, std::domain_error for a NaN.
loss::loss_and_gradient vocab_parallel_cross_entropy(tensor&& logits, std::size_t first_class, std::size_t classes,
                                                     const tensor& labels, std::size_t batch_size, process_group& group);

// Whether the vocabulary splits: T > 1, cross-entropy, an embedding first and a Linear to V outputs last, V >= T.
bool splits_vocabulary(const std::vector<std::string>& specs, const std::string& loss, int tensor_parallel);

}  // namespace ap

// Token embedding: token ids (batch, sequence), held as floats, become table rows: y[b, t] = W[x[b, t]].
#pragma once

#include "model/layer.hpp"

namespace ap {

class token_embedding final : public layer {
 public:
  // Zero until initialize or a checkpoint; std > 0 (":std=S"): normal(0, std).
  token_embedding(std::size_t vocabulary, std::size_t dim, float std = 0.0f);

  std::string describe() const override;  // "Embedding(256x64)"
  // The input's last axis is the sequence: no input width.
  std::optional<std::size_t> out_features() const override { return dim_; }

  struct saved : saved_state {
    tensor ids;  // (batch, sequence)
    std::size_t bytes() const override { return ids.byte_size(); }
  };
  // x (batch, sequence) of ids in [0, vocabulary) -> (batch, sequence, dim); throws naming the first bad one.
  tensor forward(const tensor& x, layer_cache& cache, const forward_context& ctx) const override;
  // Ids have no gradient: dx gets nothing added.
  void backward_input(const tensor& dy, layer_cache& cache, tensor* dx) const override;
  void backward_weight(const tensor& dy, layer_cache& cache) override;

  std::vector<parameter> parameters(const std::string& prefix) override;
  std::unique_ptr<layer> clone() const override { return std::make_unique<token_embedding>(*this); }
  std::string spec() const override;  // "embedding:256:64"
  void initialize(std::uint64_t seed) override;  // uniform, std 0.02; normal(0, std) if std given

 private:
  std::size_t vocabulary_, dim_;
  float std_;  // 0: the uniform default
  tensor weight_;   // (vocabulary, dim)
  tensor dweight_;  // (vocabulary, dim)
};

// The rows of ids `x` in `table` (rows [first, first + rows(table)) of a `vocabulary`-row table), zeros for
// ids held elsewhere (Note [vocab-parallel]). Throws naming `who` and the first bad id's position.
tensor embedding_rows(const layer& who, const tensor& x, const tensor& table, std::size_t first, std::size_t vocabulary);
// dtable[id - first] += dy's row for every id held (Note [embedding gradient by token]).
void add_embedding_gradient(const tensor& ids, const tensor& dy, tensor& dtable, std::size_t first);

}  // namespace ap

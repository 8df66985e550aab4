// The Loss class: compute_loss and compute_gradient, mean over the samples of the whole batch.
#pragma once

#include <memory>
#include <string>

#include "tensor/tensor.hpp"

namespace ap {

// Note [loss scaling]: the loss of a batch is the mean over its samples. A microbatch's loss and gradient
// are divided by the size of the *whole batch* (batch_size), not the microbatch, so summing the
// microbatches' losses and gradients gives exactly the full-batch ones, even for unequal microbatches.
// batch_size 0 means "this output is the whole batch" (rows(output)). Sizes count rows (every leading axis,
// as layers do): for a (batch, sequence, features) output every (sample, position) is a row, and the
// pipeline passes batch_rows(labels) of the whole batch (a language model's (batch, sequence) labels: every
// token); a microbatch of whole samples holds whole rows either way.
class loss {
 public:
  virtual ~loss() = default;
  virtual std::string name() const = 0;
  // Throws std::invalid_argument on mismatched shapes or labels out of range, std::domain_error on a NaN.
  virtual float compute_loss(const tensor& output, const tensor& target, std::size_t batch_size = 0) const = 0;
  virtual tensor compute_gradient(const tensor& output, const tensor& target,
                                  std::size_t batch_size = 0) const = 0;
  // Note [loss scaling]: the rows of output that a whole batch's `target` covers, the batch_size a pipeline
  // passes for it. Class labels hold one per row: (batch, sequence) labels of a language model count every
  // token, so the mean is over all tokens of the batch.
  virtual std::size_t batch_rows(const tensor& target) const = 0;
};

// Softmax over the last axis, then cross-entropy against class labels: target (rows) holds class indices.
class softmax_cross_entropy final : public loss {
 public:
  std::string name() const override { return "cross_entropy"; }
  float compute_loss(const tensor& output, const tensor& target, std::size_t batch_size = 0) const override;
  tensor compute_gradient(const tensor& output, const tensor& target, std::size_t batch_size = 0) const override;
  std::size_t batch_rows(const tensor& target) const override { return target.size(); }
};

// Mean squared error, target of the output's shape; per row the mean over features (so, with the mean over
// rows, the mean over all elements for any rank).
class mean_squared_error final : public loss {
 public:
  std::string name() const override { return "mse"; }
  float compute_loss(const tensor& output, const tensor& target, std::size_t batch_size = 0) const override;
  tensor compute_gradient(const tensor& output, const tensor& target, std::size_t batch_size = 0) const override;
  std::size_t batch_rows(const tensor& target) const override { return rows(target); }
};

// "cross_entropy" or "mse"; throws std::invalid_argument naming the unknown loss.
std::unique_ptr<loss> make_loss(const std::string& name);

// Number of rows of `output` whose arg-max equals the label in `target` (rows).
std::size_t count_correct(const tensor& output, const tensor& target);

}  // namespace ap

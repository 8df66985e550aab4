// The Loss class: compute_loss and compute_gradient, mean over the samples of the whole batch; and the open
// registry of losses, through which the built-in ones are made like a user's.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

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
  // Both at once, as every runner and the coordinator need them per microbatch: by default the two calls above;
  // a loss may share their work (cross-entropy computes its softmax once), giving the same bits as the two.
  struct loss_and_gradient {
    float loss;
    tensor gradient;
  };
  virtual loss_and_gradient compute_loss_and_gradient(const tensor& output, const tensor& target,
                                                      std::size_t batch_size = 0) const {
    return {compute_loss(output, target, batch_size), compute_gradient(output, target, batch_size)};
  }
  // The same from an output the caller gives up: a loss may write the gradient over it (cross-entropy does, row by
  // row), so a language model's logits, V floats a token, are held once instead of twice. The default copies.
  virtual loss_and_gradient take_loss_and_gradient(tensor&& output, const tensor& target, std::size_t batch_size = 0) const {
    return compute_loss_and_gradient(output, target, batch_size);
  }
  // The rows of output that a whole batch's `target` covers, the batch_size a pipeline passes for it
  // (Note [loss scaling]). Class labels hold one per row: (batch, sequence) labels of a language model count every
  // token, so the mean is over all tokens of the batch.
  virtual std::size_t batch_rows(const tensor& target) const = 0;
};

// Softmax over the last axis, then cross-entropy against class labels: target (rows) holds class indices.
class softmax_cross_entropy final : public loss {
 public:
  std::string name() const override { return "cross_entropy"; }
  float compute_loss(const tensor& output, const tensor& target, std::size_t batch_size = 0) const override;
  tensor compute_gradient(const tensor& output, const tensor& target, std::size_t batch_size = 0) const override;
  loss_and_gradient compute_loss_and_gradient(const tensor& output, const tensor& target,
                                              std::size_t batch_size = 0) const override;
  loss_and_gradient take_loss_and_gradient(tensor&& output, const tensor& target, std::size_t batch_size = 0) const override;
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

// Note [the user's loss]: seed 000's coordinator computes the loss with the user's compute_loss and
// compute_gradient. A user's loss derives from `loss` and registers a name, as a layer kind does
// (layer_registry.hpp); every runner takes a loss by name (pipeline_options::loss, data_tensor_runner,
// trainer), and only the coordinator's process computes it, so nodes need not know it:
//
//   class smoothed_cross_entropy final : public ap::loss { ... };
//   static const ap::loss_registration smoothed{"smoothed_cross_entropy",
//                                                [] { return std::make_unique<smoothed_cross_entropy>(); }};
//
// Its compute_loss and compute_gradient follow Note [loss scaling] (divide by batch_size when it is not 0),
// so that the microbatches' sums are the batch's: then a pipeline trains with it exactly as one process does.
using loss_factory = std::function<std::unique_ptr<loss>()>;

// Registers `name` (lower-case letters, digits and '_', starting with a letter). Throws std::logic_error
// naming it when it is already registered or not a valid name. Safe from any thread.
void register_loss(const std::string& name, loss_factory factory);

// Every registered loss name, sorted ("cross_entropy", "mse" and the user's).
std::vector<std::string> registered_losses();

// Registers a loss during static initialisation, in the user's own source file (not a static library's).
struct loss_registration {
  loss_registration(const std::string& name, loss_factory factory) { register_loss(name, std::move(factory)); }
};

// The registered loss `name`; throws std::invalid_argument naming the unknown loss and the known ones.
std::unique_ptr<loss> make_loss(const std::string& name);

// Number of rows of `output` whose arg-max equals the label in `target` (rows).
std::size_t count_correct(const tensor& output, const tensor& target);

}  // namespace ap

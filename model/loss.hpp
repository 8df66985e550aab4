// The loss interface (mean over the samples of the whole batch) and the open registry of losses.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tensor/tensor.hpp"

namespace ap {

// Note [loss scaling]: a microbatch's loss and gradient are divided by the *whole batch's* size (batch_size,
// in rows: a language model's (B, T) labels count every token), so the microbatches' sums are the batch's.
// batch_size 0: this output is the whole batch.
class loss {
 public:
  virtual ~loss() = default;
  virtual std::string name() const = 0;
  // Throws std::invalid_argument on mismatched shapes or labels out of range, std::domain_error on a NaN.
  virtual float compute_loss(const tensor& output, const tensor& target, std::size_t batch_size = 0) const = 0;
  virtual tensor compute_gradient(const tensor& output, const tensor& target,
                                  std::size_t batch_size = 0) const = 0;
  // Both at once; a loss may share their work, with the same bits.
  struct loss_and_gradient {
    float loss;
    tensor gradient;
  };
  virtual loss_and_gradient compute_loss_and_gradient(const tensor& output, const tensor& target,
                                                      std::size_t batch_size = 0) const {
    return {compute_loss(output, target, batch_size), compute_gradient(output, target, batch_size)};
  }
  // The same from an output the caller gives up, which the gradient may overwrite. The default copies.
  virtual loss_and_gradient take_loss_and_gradient(tensor&& output, const tensor& target, std::size_t batch_size = 0) const {
    return compute_loss_and_gradient(output, target, batch_size);
  }
  // The rows a whole batch's `target` covers: the batch_size to pass (Note [loss scaling]).
  virtual std::size_t batch_rows(const tensor& target) const = 0;
};

// Softmax over the last axis, then cross-entropy against class indices, target (rows).
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

// Mean squared error, target of the output's shape: the mean over all elements.
class mean_squared_error final : public loss {
 public:
  std::string name() const override { return "mse"; }
  float compute_loss(const tensor& output, const tensor& target, std::size_t batch_size = 0) const override;
  tensor compute_gradient(const tensor& output, const tensor& target, std::size_t batch_size = 0) const override;
  std::size_t batch_rows(const tensor& target) const override { return rows(target); }
};

// Note [the user's loss]: only the coordinator's process computes the loss, so a user's loss need only be
// linked there: it derives from `loss`, registers a name (loss_registration) as a layer kind does, and
// follows Note [loss scaling] so a pipeline trains as one process does.
using loss_factory = std::function<std::unique_ptr<loss>()>;

// Registers `name` (lower-case letters, digits, '_', starting with a letter). Throws std::logic_error naming
// it when taken or invalid. Thread-safe.
void register_loss(const std::string& name, loss_factory factory);

// Every registered loss name, sorted.
std::vector<std::string> registered_losses();

// Registers a loss during static initialisation, in the user's own source file (not a static library's).
struct loss_registration {
  loss_registration(const std::string& name, loss_factory factory) { register_loss(name, std::move(factory)); }
};

// The registered loss `name`; throws std::invalid_argument naming it and the known ones.
std::unique_ptr<loss> make_loss(const std::string& name);

// Rows of `output` whose arg-max equals the label in `target` (rows).
std::size_t count_correct(const tensor& output, const tensor& target);

}  // namespace ap

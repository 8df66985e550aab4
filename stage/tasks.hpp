// The tasks that travel between stages: a forward_task carries a chunk's input, a backward_task the gradient
// of a chunk's output. Plain data; how they cross actors and processes is actors/messages.hpp.
#pragma once

#include <cstdint>

#include "tensor/tensor.hpp"

namespace ap {

// A tensor travelling forward: the input of `chunk` for `microbatch` of optimizer step `step`.
// `first_sample` is the microbatch's first row in the batch (dropout masks depend on it).
// `source` is the sender's rank in the communicator (the coordinator is rank `stages`).
struct forward_task {
  std::uint64_t step = 0;  // the optimizer step: one type from train_step to the layers
  int microbatch = 0;
  int chunk = 0;
  int source = 0;
  int first_sample = 0;
  tensor data;  // (rows, features)
  // non-zero when `data` came beside the message, under this ticket (Note [activations on data links]).
  std::uint64_t ticket = 0;
  // Note [loss in the last stage] in stage/stage_compute.hpp: the microbatch's labels and the whole batch's rows,
  // carried from the coordinator to the stage that computes the loss; empty otherwise.
  tensor labels = tensor{};
  std::int64_t batch_rows = 0;
};

// A gradient travelling backward: d loss / d (output of `chunk`) for `microbatch`.
struct backward_task {
  std::uint64_t step = 0;
  int microbatch = 0;
  int chunk = 0;
  int source = 0;
  int first_sample = 0;
  tensor data;  // (rows, features)
  std::uint64_t ticket = 0;  // as forward_task's
};

}  // namespace ap

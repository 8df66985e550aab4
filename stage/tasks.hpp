// The tasks that travel between stages: a forward_task carries a chunk's input, a backward_task the gradient of
// its output. Plain data (crossing actors: actors/messages.hpp).
#pragma once

#include <cstdint>

#include "tensor/tensor.hpp"

namespace ap {

// A chunk's input for `microbatch` of optimizer step `step`. `first_sample`: the microbatch's first row in the
// batch (dropout masks depend on it); `source`: the sender's rank (the coordinator is rank `stages`).
struct forward_task {
  std::uint64_t step = 0;  // the optimizer step
  int microbatch = 0;
  int chunk = 0;
  int source = 0;
  int first_sample = 0;
  tensor data;  // (rows, features)
  // Non-zero when `data` came beside the message (Note [activations on data links]).
  std::uint64_t ticket = 0;
  // The labels and the batch's rows, for the stage computing the loss (Note [loss in the last stage]).
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

// The communicator: point-to-point tensors between ranks, a barrier, timeouts.
#pragma once

#include <chrono>
#include <stdexcept>
#include <string>

#include "failure/timeout.hpp"
#include "tensor/tensor.hpp"

namespace ap {

struct forward_task;
struct backward_task;

// A receive or barrier that waited longer than the communicator's timeout.
class timeout_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Ranks are 0 .. world_size-1. Sends never block and move the tensor (no copy in one process); a send
// returns once the message is queued at the destination. Receives block until a tensor from `source`
// arrives, in the order that source sent them, or throw timeout_error after timeout().
// Misuse throws: an invalid rank std::out_of_range, any use after shutdown() std::logic_error.
// Sending to oneself is allowed: the tensor waits in one's own inbox like any other (decided for tests
// and for a stage holding two consecutive chunks).
class communicator {
 public:
  virtual ~communicator() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  virtual std::chrono::milliseconds timeout() const = 0;

  virtual void send_forward(forward_task&& task, int destination) = 0;
  virtual void send_backward(backward_task&& task, int destination) = 0;
  virtual void send(tensor&& t, int destination) = 0;

  virtual forward_task receive_forward(int source) = 0;
  virtual backward_task receive_backward(int source) = 0;
  virtual tensor receive(int source) = 0;

  // Returns when every rank has called barrier(), or throws timeout_error.
  virtual void barrier() = 0;
  // After shutdown every call throws std::logic_error. Idempotent.
  virtual void shutdown() = 0;
};

}  // namespace ap

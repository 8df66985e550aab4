// The communicator: point-to-point tensors between ranks, a barrier, timeouts.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
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

// Note [receive handles]: an *_async call returns at once with a handle; every tensor goes to exactly one receive.
// cancel() withdraws the receive, acknowledged by the rank's inbox actor: true means nothing was or will be handed
// to it; false means it was answered and wait() gives the answer. So a tensor never goes to a receive its caller
// gave up on. A receive at an inbox that exits fails at once through one functor per communicator (CAF 0.17.6 drops
// some down messages of a monitor set up while its target exits). A handle must not outlive its actor system.
template <class T>
class receive_handle {
 public:
  // What the receiving side fills in, once: a value or an error.
  struct state {
    std::mutex mutex;
    std::condition_variable changed;
    std::optional<T> value;
    std::exception_ptr error;
    bool finished = false;
    void finish(std::optional<T> v, std::exception_ptr e) {
      {
        std::lock_guard<std::mutex> lock(mutex);
        if (finished) return;
        value = std::move(v);
        error = std::move(e);
        finished = true;
      }
      changed.notify_all();
    }
  };
  // True when the receiving side withdrew the receive, false when it was answered already.
  using withdraw_function = std::function<bool()>;

  receive_handle() = default;
  receive_handle(std::shared_ptr<state> s, withdraw_function withdraw)
      : state_(std::move(s)), withdraw_(std::move(withdraw)) {}

  bool valid() const { return state_ != nullptr; }
  // Whether wait() would return (or throw) at once.
  bool ready() const {
    check("ready");
    std::lock_guard<std::mutex> lock(state_->mutex);
    return state_->finished;
  }
  // The value, or throws what the receive failed with (timeout_error). One wait per handle; a second, or any call
  // after a withdrawing cancel(), throws std::logic_error.
  T wait() {
    check("wait");
    std::unique_lock<std::mutex> lock(state_->mutex);
    state_->changed.wait(lock, [&] { return state_->finished; });
    return take(lock);
  }
  // The value if it comes within `limit`; nothing otherwise (the receive stays in flight).
  std::optional<T> wait_for(std::chrono::milliseconds limit) {
    check("wait_for");
    std::unique_lock<std::mutex> lock(state_->mutex);
    if (!state_->changed.wait_for(lock, limit, [&] { return state_->finished; })) return std::nullopt;
    return take(lock);
  }
  // Withdraws the receive (Note [receive handles]). After true the handle is spent; after false, wait() gives
  // the answer.
  bool cancel() {
    check("cancel");
    if (withdraw_()) {
      withdrawn_ = true;
      return true;
    }
    return false;
  }

 private:
  void check(const char* what) const {
    if (!state_) throw std::logic_error(std::string("receive_handle::") + what + " on an empty handle");
    if (withdrawn_) throw std::logic_error(std::string("receive_handle::") + what + " after cancel() withdrew it");
    if (taken_) throw std::logic_error(std::string("receive_handle::") + what + " after its answer was taken");
  }
  T take(std::unique_lock<std::mutex>&) {
    taken_ = true;
    if (state_->error) std::rethrow_exception(state_->error);
    return std::move(*state_->value);
  }

  std::shared_ptr<state> state_;
  withdraw_function withdraw_;
  bool withdrawn_ = false;
  bool taken_ = false;
};

// Sends never block and move the tensor. Receives block until a tensor from `source` arrives, in send order, or
// throw timeout_error. A bad rank throws std::out_of_range, use after shutdown() std::logic_error. Sending to
// oneself is allowed.
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

  // The same receives, returning at once with a handle to wait on or cancel (Note [receive handles]).
  virtual receive_handle<forward_task> receive_forward_async(int source) = 0;
  virtual receive_handle<backward_task> receive_backward_async(int source) = 0;
  virtual receive_handle<tensor> receive_async(int source) = 0;

  // Returns when every rank has called barrier(), or throws timeout_error.
  virtual void barrier() = 0;
  // wait() gives the number of the barrier round passed.
  virtual receive_handle<std::uint64_t> barrier_async() = 0;
  // After shutdown every call throws std::logic_error. Idempotent.
  virtual void shutdown() = 0;
};

}  // namespace ap

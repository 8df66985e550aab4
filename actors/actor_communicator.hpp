// The communicator over CAF actors: each rank has an endpoint actor that receives its tensors, local or remote
// alike.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <vector>

#include <caf/all.hpp>

#include "network/communicator.hpp"
#include "actors/messages.hpp"

namespace ap {

struct pending_receives;  // a communicator's unanswered receives at one actor (Note [receive handles])

class actor_communicator final : public communicator {
 public:
  // endpoints[r] receives everything sent to rank r. A rank whose endpoint is an inbox can also receive(); a
  // stage's endpoint is its retriever.
  actor_communicator(caf::actor_system& system, int rank, std::vector<caf::actor> endpoints, caf::actor barrier,
                     std::chrono::milliseconds timeout = default_timeout);
  ~actor_communicator() override;

  int rank() const override { return rank_; }
  int world_size() const override { return static_cast<int>(endpoints_.size()); }
  std::chrono::milliseconds timeout() const override { return timeout_; }
  const caf::actor& endpoint(int rank) const;

  void send_forward(forward_task&& task, int destination) override;
  void send_backward(backward_task&& task, int destination) override;
  void send(tensor&& t, int destination) override;
  forward_task receive_forward(int source) override;
  backward_task receive_backward(int source) override;
  tensor receive(int source) override;
  receive_handle<forward_task> receive_forward_async(int source) override;
  receive_handle<backward_task> receive_backward_async(int source) override;
  receive_handle<tensor> receive_async(int source) override;
  void barrier() override;
  receive_handle<std::uint64_t> barrier_async() override;
  void shutdown() override { closed_ = true; }

 private:
  void check_open(const char* operation) const;
  void check_rank(int r, const char* operation) const;
  // Asks this rank's inbox for the next Reply from `source`, answered as a T; defined in the .cpp.
  template <class T, class Reply>
  receive_handle<T> take_async(int kind, int source);
  // A handle's answer, waiting no longer than the timeout and a grace (Note [receive handles]).
  template <class T>
  T answer(receive_handle<T>& handle, const std::string& what);

  caf::actor_system& system_;
  int rank_;
  std::vector<caf::actor> endpoints_;
  caf::actor barrier_;
  std::chrono::milliseconds timeout_;
  std::atomic<bool> closed_{false};
  std::atomic<std::uint64_t> next_receive_{0};  // ids of this communicator's receives
  std::shared_ptr<pending_receives> inbox_pending_;    // failed at once if this rank's inbox exits
  std::shared_ptr<pending_receives> barrier_pending_;  // likewise for the barrier
};

// An inbox: holds what arrives per (kind, source) and answers blocking receives in arrival order.
caf::actor spawn_inbox(caf::actor_system& system);
// A barrier for `world_size` ranks; a round not complete within the timeout fails for every waiter.
caf::actor spawn_barrier(caf::actor_system& system, int world_size, std::chrono::milliseconds timeout);

// An in-process world of `world_size` ranks, each with an inbox: the communicator of stages that share a process.
class local_world {
 public:
  local_world(caf::actor_system& system, int world_size,
              std::chrono::milliseconds timeout = default_timeout);
  ~local_world();
  communicator& at(int rank) { return *ranks_.at(static_cast<std::size_t>(rank)); }
  int size() const { return static_cast<int>(ranks_.size()); }

 private:
  std::vector<caf::actor> inboxes_;
  caf::actor barrier_;
  std::vector<std::unique_ptr<actor_communicator>> ranks_;
};

}  // namespace ap

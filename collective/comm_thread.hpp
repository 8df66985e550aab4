// The communication thread that runs a group's collectives in order (Note [communication thread]).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "collective/process_group.hpp"

namespace ap {

// Why a group failed, once known; the first reason stays. Shared with whatever else waits on the group's peers.
class group_failure {
 public:
  // Keeps `why` and `code` unless the group failed already; true when it was the first. `code` is what its
  // collectives fail with: lost_peer (a lost connection) or lost_node (damaged bytes), which recovery replays, else
  // collective (Note [the cause, not a peer's view]).
  bool fail(const std::string& why, error_code code = error_code::collective);
  // The reason, empty while the group is healthy.
  std::string text() const;
  error_code code() const;
  // The reason, waiting up to `timeout` for one (so a hang-up waits for the message naming why the peer went).
  std::string wait(std::chrono::milliseconds timeout) const;

 private:
  mutable std::mutex mutex_;
  mutable std::condition_variable changed_;
  std::string failure_;
  error_code code_ = error_code::collective;
};

// A collective's handle state: wait() blocks until finish(), then throws collective_error with its text and code,
// if any. No timeout here: the communication thread bounds its waits and then finishes the op.
class finishing_op : public collective_handle::state {
 public:
  // Done, well (empty `why`) or badly; wakes every wait().
  void finish(std::string why, error_code code = error_code::collective);
  void wait() override;
  bool ready() const override;

 private:
  mutable std::mutex mutex_;
  std::condition_variable finished_;
  bool done_ = false;
  std::string error_;
  error_code code_ = error_code::collective;
};

// One collective for the communication thread: what it does and how its errors name it.
class comm_op : public finishing_op {
 public:
  std::uint64_t index = 0;  // its number among the group's collectives (0, 1, ...), given when it is queued
  // "group 'dp' all_reduce #3 on rank 0": what a failure's text starts with.
  virtual std::string describe() const = 0;
  // The collective itself, on the communication thread; throws what makes it fail.
  virtual void run() = 0;
  // After run(), well or badly: gives back what the collective borrowed, before its handle finishes.
  virtual void settle() {}
};

// Note [communication thread]: ring_group, gloo_group and hierarchical_group start a collective by queueing it here
// and return its handle (Note [async collectives]); one thread runs the queue in order, so every rank's k-th
// collective meets its peers' k-th. A collective that throws fails the group: its handle fails with
// "<describe()>: <reason>", the reason being the group's earlier failure if any (an abort's reason, not the socket it
// closed), else the collective's own error. Code `collective`, or lost_node for a link's damaged bytes so recovery
// replays the step. A failed group fails every pending and later collective at once with the same text. `interrupt`
// ends a running collective's waits now (gloo closes its sockets, hierarchical_group aborts its parts).
class comm_thread {
 public:
  explicit comm_thread(std::function<void(const std::string& why)> interrupt = {});
  // stop("the group is gone") unless stopped already.
  ~comm_thread();
  comm_thread(const comm_thread&) = delete;
  comm_thread& operator=(const comm_thread&) = delete;

  // Starts the thread (a network group once connected); collectives queued before wait for it.
  void start();
  bool started() const;
  // Queues `op` (its index given here); fails it at once if the group has failed.
  collective_handle submit(std::shared_ptr<comm_op> op);
  // The group fails with `why` (the first reason stays): every pending and later collective fails, and the
  // running one is interrupted (a group's abort()).
  void abort(const std::string& why);
  const std::shared_ptr<group_failure>& failure() const { return failure_; }
  // Fails the group with `why`, interrupts the collectives, and ends the thread once the queue is empty. The
  // group's destructor calls it before its transport goes.
  void stop(const std::string& why);

 private:
  void serve();

  std::function<void(const std::string&)> interrupt_;
  std::shared_ptr<group_failure> failure_ = std::make_shared<group_failure>();
  mutable std::mutex mutex_;  // guards the queue, the counters and the flags
  std::condition_variable work_;
  std::deque<std::shared_ptr<comm_op>> queue_;
  std::uint64_t next_index_ = 0;
  bool running_ = false, stopping_ = false;
  std::thread thread_;
};

}  // namespace ap

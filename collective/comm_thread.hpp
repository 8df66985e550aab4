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

// Why a group failed; the first reason stays. Shared with whatever else waits on the group's peers.
class group_failure {
 public:
  // Keeps `why` and `code` (what its collectives fail with) unless the group failed already; true when first.
  bool fail(const std::string& why, error_code code = error_code::collective);
  // The reason, empty while the group is healthy.
  std::string text() const;
  error_code code() const;
  // The reason, waiting up to `timeout` for one.
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

// One collective for the communication thread.
class comm_op : public finishing_op {
 public:
  std::uint64_t index = 0;  // given when queued
  // "group 'dp' all_reduce #3 on rank 0": what a failure's text starts with.
  virtual std::string describe() const = 0;
  // The collective itself, on the communication thread; throws what makes it fail.
  virtual void run() = 0;
  // After run(), well or badly: gives back what the collective borrowed, before its handle finishes.
  virtual void settle() {}
};

// Note [communication thread]: a network group queues each collective here and returns its handle (Note [async
// collectives]); one thread runs the queue in order, so every rank's k-th collective meets its peers' k-th. A
// collective that throws fails the group; its handle fails with "<describe()>: <reason>", the reason being the
// group's earlier failure if any (an abort's reason, not the socket it closed). A failed group fails every pending
// and later collective at once. `interrupt` ends a running collective's waits now.
class comm_thread {
 public:
  explicit comm_thread(std::function<void(const std::string& why)> interrupt = {});
  // stop("the group is gone") unless stopped already.
  ~comm_thread();
  comm_thread(const comm_thread&) = delete;
  comm_thread& operator=(const comm_thread&) = delete;

  // Collectives queued before start() wait for it.
  void start();
  bool started() const;
  // Queues `op` (its index given here); fails it at once if the group has failed.
  collective_handle submit(std::shared_ptr<comm_op> op);
  // Fails the group with `why`: every pending and later collective fails, the running one is interrupted.
  void abort(const std::string& why);
  const std::shared_ptr<group_failure>& failure() const { return failure_; }
  // abort(why), then ends the thread once the queue is empty; called before the group's transport goes.
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

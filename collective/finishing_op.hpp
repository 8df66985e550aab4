// The handle state of a collective that a group's communication thread finishes (ring_group, gloo_group): the
// caller's wait() blocks until finish(), then throws collective_error with the text finish() gave, if any.
// No timeout here: the communication thread bounds each of its waits on a peer and then finishes the op.
#pragma once

#include <condition_variable>
#include <mutex>
#include <string>

#include "collective/process_group.hpp"

namespace ap {

class finishing_op : public collective_handle::state {
 public:
  // Done, well (empty `why`) or badly; wakes every wait().
  void finish(std::string why) {
    std::lock_guard lock(mutex_);
    done_ = true;
    error_ = std::move(why);
    finished_.notify_all();
  }
  void wait() override {
    std::unique_lock lock(mutex_);
    finished_.wait(lock, [&] { return done_; });
    if (!error_.empty()) throw collective_error(error_);
  }
  bool ready() const override {
    std::lock_guard lock(mutex_);
    return done_;
  }

 private:
  mutable std::mutex mutex_;
  std::condition_variable finished_;
  bool done_ = false;
  std::string error_;
};

}  // namespace ap

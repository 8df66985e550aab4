#include "collective/comm_thread.hpp"

namespace ap {

bool group_failure::fail(const std::string& why, error_code code) {
  std::lock_guard lock(mutex_);
  if (!failure_.empty()) return false;
  failure_ = why;
  code_ = code;
  changed_.notify_all();
  return true;
}

std::string group_failure::text() const {
  std::lock_guard lock(mutex_);
  return failure_;
}

error_code group_failure::code() const {
  std::lock_guard lock(mutex_);
  return code_;
}

std::string group_failure::wait(std::chrono::milliseconds timeout) const {
  std::unique_lock lock(mutex_);
  changed_.wait_for(lock, timeout, [&] { return !failure_.empty(); });
  return failure_;
}

void finishing_op::finish(std::string why, error_code code) {
  std::lock_guard lock(mutex_);
  done_ = true;
  error_ = std::move(why);
  code_ = code;
  finished_.notify_all();
}

void finishing_op::wait() {
  std::unique_lock lock(mutex_);
  finished_.wait(lock, [&] { return done_; });
  if (!error_.empty()) throw collective_error(code_, error_);
}

bool finishing_op::ready() const {
  std::lock_guard lock(mutex_);
  return done_;
}

comm_thread::comm_thread(std::function<void(const std::string&)> interrupt) : interrupt_(std::move(interrupt)) {}

comm_thread::~comm_thread() { stop("the group is gone"); }

void comm_thread::start() {
  std::lock_guard lock(mutex_);
  if (!thread_.joinable() && !stopping_) thread_ = std::thread([this] { serve(); });
}

bool comm_thread::started() const {
  std::lock_guard lock(mutex_);
  return thread_.joinable();
}

collective_handle comm_thread::submit(std::shared_ptr<comm_op> op) {
  std::lock_guard lock(mutex_);
  op->index = next_index_++;
  if (const std::string why = failure_->text(); !why.empty()) {
    op->finish(op->describe() + ": " + why, failure_->code());
  } else {
    queue_.push_back(op);
    work_.notify_one();
  }
  return collective_handle(std::move(op));
}

void comm_thread::abort(const std::string& why) {
  failure_->fail(why);
  if (interrupt_) interrupt_(failure_->text());
}

void comm_thread::stop(const std::string& why) {
  bool busy = false;
  {
    std::lock_guard lock(mutex_);
    if (stopping_ && !thread_.joinable()) return;
    busy = running_ || !queue_.empty();
    stopping_ = true;
  }
  failure_->fail(why);
  if (busy && interrupt_) interrupt_(failure_->text());
  work_.notify_all();
  if (thread_.joinable()) thread_.join();
  std::deque<std::shared_ptr<comm_op>> left;  // queued while no thread ran
  {
    std::lock_guard lock(mutex_);
    left.swap(queue_);
  }
  for (auto& op : left) op->finish(op->describe() + ": " + failure_->text(), failure_->code());
}

void comm_thread::serve() {
  for (;;) {
    std::shared_ptr<comm_op> op;
    {
      std::unique_lock lock(mutex_);
      work_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;
      op = std::move(queue_.front());
      queue_.pop_front();
      running_ = true;
    }
    std::string error;
    error_code code = error_code::collective;
    if (const std::string why = failure_->text(); !why.empty()) {
      error = op->describe() + ": " + why;
      code = failure_->code();
    } else {
      std::string thrown;
      error_code thrown_code = error_code::collective;
      try {
        op->run();
      } catch (const std::exception& e) {
        thrown = e.what();
        if (thrown.empty()) thrown = "an error without text";
        thrown_code = code_of(e);
      }
      if (!thrown.empty()) {
        // A failed collective leaves its peers at an unknown place: the group cannot go on.
        // Damaged bytes seen by this collective itself keep their code (Note [communication thread]).
        failure_->fail(thrown, thrown_code == error_code::lost_node ? error_code::lost_node : error_code::collective);
        code = failure_->code();
        const std::string why = failure_->text();  // an earlier failure's reason rather than what it caused
        if (interrupt_) interrupt_(why);            // a peer waiting on this rank fails now, not after its timeout
        error = op->describe() + ": " + why;
      }
      op->settle();
    }
    {
      std::lock_guard lock(mutex_);
      running_ = false;
    }
    op->finish(std::move(error), code);
  }
}

}  // namespace ap

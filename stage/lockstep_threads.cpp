#include "stage/lockstep_threads.hpp"

#include <stdexcept>
#include <string>

#include "tensor/compute.hpp"

namespace ap {

lockstep_threads::lockstep_threads(int ranks, std::vector<compute_cores> cores, bool caller_runs_rank0)
    : ranks_(ranks), cores_(std::move(cores)), caller_runs_rank0_(caller_runs_rank0) {
  if (ranks < 1) throw std::invalid_argument("lockstep_threads: ranks must be at least 1, got " + std::to_string(ranks));
  if (cores_.empty()) cores_.assign(static_cast<std::size_t>(ranks), compute_cores{});
  if (cores_.size() != static_cast<std::size_t>(ranks))
    throw std::invalid_argument("lockstep_threads: " + std::to_string(cores_.size()) + " core assignments for " +
                                std::to_string(ranks) + " ranks");
  for (int r = caller_runs_rank0 ? 1 : 0; r < ranks; ++r) threads_.emplace_back([this, r] { serve(r); });
}

lockstep_threads::~lockstep_threads() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (auto& t : threads_) t.join();
}

void lockstep_threads::serve(int rank) {
  use_compute_cores(cores_[static_cast<std::size_t>(rank)]);
  unsigned long long seen = 0;
  for (;;) {
    const std::function<void(int)>* work = nullptr;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return stopping_ || generation_ != seen; });
      if (stopping_) return;
      seen = generation_;
      work = work_;
    }
    std::exception_ptr error;
    try {
      (*work)(rank);
    } catch (...) {
      error = std::current_exception();
    }
    std::lock_guard<std::mutex> lock(mutex_);
    // Moved, not copied: the exception is destroyed on the caller's thread, which reads it (a copy released here
    // would race with the caller's reads through the uninstrumented reference count).
    errors_[static_cast<std::size_t>(rank)] = std::move(error);
    if (--running_ == 0) done_.notify_one();
  }
}

std::vector<std::exception_ptr> lockstep_threads::run(const std::function<void(int)>& work) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    errors_.assign(static_cast<std::size_t>(ranks_), nullptr);
    work_ = &work;
    running_ = static_cast<int>(threads_.size());
    ++generation_;
  }
  wake_.notify_all();
  std::exception_ptr mine;
  if (caller_runs_rank0_) {
    try {
      use_compute_cores(cores_[0]);
      work(0);
    } catch (...) {
      mine = std::current_exception();
    }
  }
  std::unique_lock<std::mutex> lock(mutex_);
  done_.wait(lock, [&] { return running_ == 0; });
  if (caller_runs_rank0_) errors_[0] = mine;
  work_ = nullptr;
  return errors_;
}

}  // namespace ap

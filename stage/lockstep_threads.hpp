// T threads running the same function for ranks 0..T-1 at once and returning together
// (Note [tensor-parallel stage]).
#pragma once

#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "tensor/compute.hpp"

namespace ap {

class lockstep_threads {
 public:
  // Rank 0 runs on the caller's thread, or with `caller_runs_rank0` false on a thread of its own (the caller only
  // waits, never pinned). Rank r computes on cores[r] (Note [cores per rank]); empty: unpinned.
  explicit lockstep_threads(int ranks, std::vector<compute_cores> cores = {}, bool caller_runs_rank0 = true);
  ~lockstep_threads();
  lockstep_threads(const lockstep_threads&) = delete;
  lockstep_threads& operator=(const lockstep_threads&) = delete;

  int ranks() const { return ranks_; }
  // Runs work(r) for every rank concurrently; returns each rank's exception (null where none), never throws.
  std::vector<std::exception_ptr> run(const std::function<void(int)>& work);

 private:
  void serve(int rank);

  int ranks_;
  std::vector<compute_cores> cores_;  // one per rank
  bool caller_runs_rank0_;
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  const std::function<void(int)>* work_ = nullptr;
  std::vector<std::exception_ptr> errors_;
  unsigned long long generation_ = 0;  // run() calls: a thread serves each generation once
  int running_ = 0;                    // helper threads still in the current generation
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace ap

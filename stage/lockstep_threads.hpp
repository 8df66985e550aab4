// T threads that run the same function for ranks 0..T-1 at once and return together: a tensor-parallel
// stage's ranks executing one action in lockstep (Note [tensor-parallel stage] in stage/lockstep_stage.hpp).
#pragma once

#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace ap {

class lockstep_threads {
 public:
  // ranks - 1 threads are started (rank 0 runs on the caller's thread); each computes with one oneDNN /
  // OpenMP thread, as a stage does (the ranks give the parallelism).
  explicit lockstep_threads(int ranks);
  ~lockstep_threads();
  lockstep_threads(const lockstep_threads&) = delete;
  lockstep_threads& operator=(const lockstep_threads&) = delete;

  int ranks() const { return ranks_; }
  // Runs work(r) for every rank r concurrently and returns when all have returned. Returns each rank's
  // exception (null where it returned normally); never throws what work throws.
  std::vector<std::exception_ptr> run(const std::function<void(int)>& work);

 private:
  void serve(int rank);

  int ranks_;
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  const std::function<void(int)>* work_ = nullptr;
  std::vector<std::exception_ptr> errors_;
  unsigned long long generation_ = 0;  // counts run() calls: a thread serves each generation once
  int running_ = 0;                    // helper threads still in the current generation
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace ap

// T threads that run the same function for ranks 0..T-1 at once and return together: a tensor-parallel
// stage's ranks executing one action in lockstep (Note [tensor-parallel stage] in stage/stage_compute.hpp).
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
  // ranks - 1 threads are started and rank 0 runs on the caller's thread, or, with `caller_runs_rank0` false,
  // `ranks` threads (the caller only waits: its own thread is never pinned). Rank r computes on cores[r] (Note
  // [cores per rank] in tensor/compute.hpp: its intra-op threads and, if pinned, its cores), rank 0 on the
  // caller's thread from its first run(); empty `cores`: one thread each, not pinned.
  explicit lockstep_threads(int ranks, std::vector<compute_cores> cores = {}, bool caller_runs_rank0 = true);
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
  std::vector<compute_cores> cores_;  // one per rank
  bool caller_runs_rank0_;
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

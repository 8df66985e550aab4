// Collectives among ranks that are threads of one process, through shared memory.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "collective/process_group.hpp"
#include "failure/timeout.hpp"

namespace ap {

struct local_group_state;

// Note [local collectives]: each rank posts pointers to its own tensors and goes on; once every rank has
// joined collective k, the group's one communication thread computes it straight from the ranks' buffers
// into theirs (no tensor is copied whole: reductions go through one chunk-sized accumulator). Sums run in
// rank order 0, 1, ..., so every rank gets identical bits, the same on every run and thread count. The
// callers never compute a collective themselves, so they compute on while it runs (Note [async
// collectives]). A collective handed to the communication thread always completes (it waits on nothing),
// so a wait never returns while the thread still touches the caller's tensors.
class local_group {
 public:
  local_group(std::string name, int size, std::chrono::milliseconds timeout = default_timeout);
  // Stops the communication thread after the collectives it holds; unfinished ones fail with an error
  // saying the group is gone. Members and handles may outlive the group: their calls then fail.
  ~local_group();
  local_group(const local_group&) = delete;
  local_group& operator=(const local_group&) = delete;

  // Rank `rank`'s view (each rank's thread uses its own). Throws std::out_of_range naming the group.
  std::unique_ptr<process_group> member(int rank);
  const std::string& name() const;
  int size() const;

 private:
  std::shared_ptr<local_group_state> state_;
  std::thread communication_;
};

}  // namespace ap

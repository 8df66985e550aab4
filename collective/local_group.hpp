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
// joined collective k, it is computed straight from the ranks' buffers into theirs (no tensor is copied
// whole: an all-reduce goes through one block-sized accumulator), in 64 KB chunks shared out among the
// group's communication thread and every rank blocked in wait() (Note [shared reduction] in
// local_group.cpp). Sums run in rank order 0, 1, ..., so every rank gets identical bits, the same on every
// run, thread count and whoever sums a chunk. A rank starting a collective never computes it, so it
// computes on while it runs (Note [async collectives]). A collective whose ranks have all joined always
// completes or is cancelled by an abort, waiting on no one, and a wait never returns while another thread
// still touches the caller's tensors.
class local_group {
 public:
  local_group(std::string name, int size, std::chrono::milliseconds timeout = default_timeout);
  // Stops the communication thread after the collectives every rank has joined; the others fail with an
  // error saying the group is gone. Members and handles may outlive the group: their calls then fail.
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

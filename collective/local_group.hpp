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

// Note [local collectives]: each rank posts pointers to its tensors and goes on; once every rank has joined
// collective k, it is computed straight from the ranks' buffers into theirs, in chunks shared among the
// communication thread and the ranks blocked in wait() (Note [shared reduction]). Sums run in rank order, so every
// rank gets identical bits on every run. A joined collective completes or is cancelled, waiting on no one, and a
// wait never returns while another thread still touches the caller's tensors.
class local_group {
 public:
  local_group(std::string name, int size, std::chrono::milliseconds timeout = default_timeout);
  // Finishes the joined collectives, fails the others. Members and handles may outlive the group; their calls fail.
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

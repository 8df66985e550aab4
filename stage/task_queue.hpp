// The stage's pending tasks and the retriever's one decision: is the next scheduled action ready? No actor.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <variant>

#include "stage/tasks.hpp"
#include "schedule/schedule.hpp"

namespace ap {

// A forward or backward task waiting for its turn.
using pending_task = std::variant<forward_task, backward_task>;

// Note [why the retriever holds early tasks]: tasks arrive in whatever order peers finish them, but a stage must
// run exactly its schedule's order (its memory bound depends on it), so arrivals wait here until their action is
// next.
class task_queue {
 public:
  struct key {
    std::uint64_t step;
    bool forward;
    int microbatch, chunk;
    bool operator<(const key& o) const {
      return std::tie(step, forward, microbatch, chunk) < std::tie(o.step, o.forward, o.microbatch, o.chunk);
    }
  };

  void put(forward_task&& t);
  void put(backward_task&& t);
  // The task the action consumes, or nullopt for W (it needs no message: its I left the cache).
  static std::optional<key> needed_by(const action& a, std::uint64_t step);
  bool ready(const action& a, std::uint64_t step) const;
  // Removes and returns the task the action consumes (ready() must be true; not for W).
  pending_task take(const action& a, std::uint64_t step);
  // Drops every task of a step before `step` (left over from an aborted step).
  void drop_before(std::uint64_t step);
  std::size_t size() const { return tasks_.size(); }
  // "backward microbatch 3 of chunk 2" (0-based), for errors.
  static std::string describe(const action& a);

 private:
  std::map<key, pending_task> tasks_;
};

}  // namespace ap

#include "stage/task_queue.hpp"

#include <stdexcept>

namespace ap {

void task_queue::put(forward_task&& t) {
  const key k{t.step, true, t.microbatch, t.chunk};
  tasks_.insert_or_assign(k, pending_task{std::move(t)});
}

void task_queue::put(backward_task&& t) {
  const key k{t.step, false, t.microbatch, t.chunk};
  tasks_.insert_or_assign(k, pending_task{std::move(t)});
}

std::optional<task_queue::key> task_queue::needed_by(const action& a, std::uint64_t step) {
  if (!runs_on_arrival(a.kind)) return std::nullopt;
  return key{step, a.kind == op::forward, a.microbatch, a.chunk};
}

bool task_queue::ready(const action& a, std::uint64_t step) const {
  const auto k = needed_by(a, step);
  return !k || tasks_.count(*k) > 0;
}

pending_task task_queue::take(const action& a, std::uint64_t step) {
  const auto k = needed_by(a, step);
  auto it = k ? tasks_.find(*k) : tasks_.end();
  if (it == tasks_.end()) throw std::logic_error("task_queue: no task for " + describe(a));
  pending_task t = std::move(it->second);
  tasks_.erase(it);
  return t;
}

void task_queue::drop_before(std::uint64_t step) {
  for (auto it = tasks_.begin(); it != tasks_.end();) it = it->first.step < step ? tasks_.erase(it) : std::next(it);
}

std::string task_queue::describe(const action& a) {
  return std::string(name_of(a.kind).word) +
         (a.microbatch == all_microbatches ? std::string(" of the whole batch") : " microbatch " + std::to_string(a.microbatch)) +
         " of chunk " + std::to_string(a.chunk);
}

}  // namespace ap

// The retriever of a stage: queues arriving tasks and hands the processor the schedule's next actions in order.

// Note [mailbox as the queue]: tasks wait in task_queue, not in the mailbox via caf::skip: CAF 0.17 re-offers
// every skipped message after each consumed one, O(N^2) a step (docs/performance.md), and cannot list them for
// the timeout's text and an abort's drop_before.
#include "actors/pipeline_actors.hpp"
#include "stage/task_queue.hpp"

namespace ap {
namespace {

struct retriever_state {
  retriever_config config;
  task_queue queue;
  coordinator_actor coordinator;
  std::uint64_t step = 0;
  bool running = false;      
  int in_flight = 0;           // at most max_in_flight
  std::size_t cursor = 0;      // next action to dispatch
  std::uint64_t wait_id = 0; 
  bool waiting = false;        // for actions[cursor]
  std::chrono::steady_clock::time_point wait_since;
  bool timer_armed = false;    // Note [one timer per retriever]
  static inline const char* name = "retriever";
};

using retriever_self = retriever_actor::stateful_pointer<retriever_state>;

// Note [one action ahead]: the processor runs one task at a time, but the retriever hands it the next action
// while the current one runs, saving a wake-up and a round trip per task. A task handed over before an abort is
// dropped by the processor (Note [tasks after an abort]).
constexpr int max_in_flight = 2;

// The step's events, on the steady clock, for the coordinator; empty in one process (Note [events from nodes]).
std::vector<stage_event> events_to_report(const retriever_config& c) {
  if (!c.report_events || !c.log) return {};
  std::vector<stage_event> events = c.log->drain();
  const double epoch = c.log->epoch_us();
  for (auto& e : events) e.time_us += epoch;
  return events;
}

void fail(retriever_self self, error_code code, std::string what) {
  auto& st = self->state;
  st.running = false;
  self->send(st.coordinator, stage_failed{st.config.stage, st.step, std::move(what), code});
}

// Note [one timer per retriever]: a CAF 0.17 delayed message cannot be cancelled and stays in the actor clock
// until it fires; one per wait piled up and fragmented the heap in long runs. So at most one timer is out: a wait
// that begins meanwhile records its start, and a timer firing early for the current wait re-arms for the rest.
void arm_timer(retriever_self self, std::chrono::steady_clock::duration after) {
  auto& st = self->state;
  st.timer_armed = true;
  self->delayed_send(self, std::chrono::duration_cast<std::chrono::milliseconds>(after) + std::chrono::milliseconds(1),
                     timeout_atom::value, st.wait_id, st.step);
}

// Sends the next actions whose tasks are here; an idle processor missing its next task starts a timed wait.
void dispatch(retriever_self self) {
  auto& st = self->state;
  while (st.running && st.in_flight < max_in_flight && st.cursor < st.config.actions.size()) {
    const action& a = st.config.actions[st.cursor];
    if (!st.queue.ready(a, st.step)) {
      if (st.in_flight == 0 && !st.waiting) {
        st.waiting = true;
        ++st.wait_id;
        st.wait_since = std::chrono::steady_clock::now();
        if (!st.timer_armed) arm_timer(self, st.config.timeout);
      }
      return;
    }
    st.waiting = false;
    ++st.wait_id;
    ++st.cursor;
    ++st.in_flight;
    if (a.kind == op::backward_weight) {
      self->send(st.config.processor, run_weight{st.step, a.microbatch, a.chunk});
      continue;
    }
    if (is_reduction(a)) {  // Note [gradient reduction]
      self->send(st.config.processor, run_reduce{st.step, a.chunk});
      continue;
    }
    pending_task task = st.queue.take(a, st.step);
    if (auto* t = std::get_if<forward_task>(&task)) self->send(st.config.processor, run_forward{std::move(*t)});
    else self->send(st.config.processor, run_backward{a.kind, std::get<backward_task>(std::move(task))});
  }
}

template <class Task>
void arrive(retriever_self self, Task& t, op kind) {
  auto& st = self->state;
  if (t.step < st.step || (t.step == st.step && !st.running && st.cursor > 0)) return;
  if (st.config.log) st.config.log->record(st.config.stage, event_kind::arrive, kind, t.step, t.microbatch, t.chunk);
  st.queue.put(std::move(t));
  dispatch(self);
}

retriever_actor::behavior_type retriever(retriever_self self, retriever_config config) {
  self->state.config = std::move(config);
  return {
      [=](forward_task& t) { arrive(self, t, op::forward); },
      [=](backward_task& t) { arrive(self, t, op::backward); },
      [=](begin_atom, std::uint64_t step) {
        auto& st = self->state;
        // Note [typed stage interfaces]
        st.coordinator = caf::actor_cast<coordinator_actor>(self->current_sender());
        st.step = step;
        st.running = true;
        st.cursor = 0;
        st.waiting = false;
        st.queue.drop_before(step);
        self->send(st.config.processor, begin_atom::value, step);
        if (st.config.actions.empty()) {
          st.running = false;
          self->send(st.coordinator, stage_done{st.config.stage, step, 0, 0, events_to_report(st.config)});
          return;
        }
        dispatch(self);
      },
      [=](task_done& d) {
        auto& st = self->state;
        --st.in_flight;
        if (d.step != st.step || !st.running) return dispatch(self);
        if (!d.error.empty()) return fail(self, d.code, std::move(d.error));
        if (st.cursor == st.config.actions.size() && st.in_flight == 0) {
          st.running = false;
          self->send(st.coordinator, stage_done{st.config.stage, st.step, d.peak_stash, d.peak_stash_bytes,
                                                events_to_report(st.config)});
          return;
        }
        dispatch(self);
      },
      [=](timeout_atom, std::uint64_t, std::uint64_t) {
        auto& st = self->state;
        st.timer_armed = false;
        if (!st.running || st.in_flight > 0 || !st.waiting) return;
        const auto waited = std::chrono::steady_clock::now() - st.wait_since;
        if (waited < st.config.timeout) return arm_timer(self, st.config.timeout - waited);
        const std::uint64_t step = st.step;
        const action& a = st.config.actions[st.cursor];
        fail(self, error_code::timeout, "stage " + std::to_string(st.config.stage) + ": waited " + std::to_string(st.config.timeout.count()) +
                       " ms for the task of its next action, " + task_queue::describe(a) + " (step " +
                       std::to_string(step) + "); " + std::to_string(st.queue.size()) + " other tasks are queued");
      },
      [=](abort_atom, std::uint64_t step) {
        auto& st = self->state;
        if (step == st.step) st.running = false;
        st.queue.drop_before(step + 1);
      },
  };
}

}  // namespace

retriever_actor spawn_retriever(caf::actor_system& system, retriever_config config) {
  return system.spawn(retriever, std::move(config));
}

}  // namespace ap

// bench_mailbox_queue: per-task cost of holding scrambled tasks in a retriever's task_queue or its mailbox (caf::skip).
//
// Note [mailbox as the queue] in actors/retriever.cpp holds the figures and the decision.
//
// Three real CAF actors in one actor system (the project's scheduler settings): a source sends N small
// forward_task / backward_task messages (a 1x1 tensor each) to a retriever in some arrival order, then
// begin_atom (as the coordinator does, Note [enqueue before begin]); the retriever hands them to a processor
// stand-in in a fixed schedule order (F0 B0 F1 B1 ... over N/2 microbatches), at most two in flight (the real
// retriever's max_in_flight), and the stand-in answers each with task_done. Two retrievers:
//   queue   every arrival is handled at once and kept in stage/task_queue (a std::map keyed by step, kind,
//           microbatch, chunk); begin and every task_done dispatch from it: the current design.
//   skip    a task that is not the schedule's next one (or arrives with two in flight) returns caf::skip and
//           stays in the mailbox; CAF 0.17.6 moves it to the mailbox's cache and re-offers every cached
//           message after each message the actor consumes (intrusive/drr_cached_queue.hpp, new_round).
// Arrival orders: scrambled (a random permutation, seeded per round, the same for both designs), reverse (the
// worst case for skip: the wanted task is always the last one cached) and in order (its best case).
// Timed: from the source's first send to the stand-in receiving the last task, per task; the median over
// the rounds, the two designs alternating within each round.
//
// It also counts how often skip's task handlers ran per task (offers/task: 1 is the least; CAF offers every
// skipped message again after each message consumed), and checks what the stage log would need from skip:
// whether the actor can list the tasks it skipped (skip listed: the forward/backward tasks it finds in
// get_normal_queue().cache() when begin arrives).
//
// Usage: bench_mailbox_queue [--rounds R] [--warmup W]

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <future>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <caf/all.hpp>

#include "actors/messages.hpp"
#include "actors/scheduler_config.hpp"
#include "stage/task_queue.hpp"

namespace {

using namespace ap;
using steady = std::chrono::steady_clock;

constexpr std::uint64_t bench_step = 1;
constexpr int max_in_flight = 2;  // as actors/retriever.cpp

// The schedule: F0 B0 F1 B1 ... (chunk 0), N actions that each consume one task.
std::vector<action> schedule_of(int n) {
  std::vector<action> actions;
  for (int mb = 0; mb < n / 2; ++mb) {
    actions.push_back(action{0, op::forward, mb, 0});
    actions.push_back(action{0, op::backward, mb, 0});
  }
  return actions;
}

// ---- the processor stand-in: checks the order, answers task_done, stamps the last task --------------------

struct finish_line {
  std::promise<steady::time_point> done;  // when the last task arrived
  bool in_order = true;
  std::size_t waiting_seen = 0;  // skip: tasks listed in the mailbox cache at begin
  std::size_t offers = 0;        // skip: how often a task handler ran (once per task is the least)
};

struct consumer_state {
  std::vector<action> expected;
  std::size_t next = 0;
  std::shared_ptr<finish_line> finish;
  static inline const char* name = "consumer";
};

void take(caf::stateful_actor<consumer_state>* self, op kind, int microbatch, int chunk) {
  auto& st = self->state;
  const action& a = st.expected.at(st.next);
  if (a.kind != kind || a.microbatch != microbatch || a.chunk != chunk) st.finish->in_order = false;
  self->send(caf::actor_cast<caf::actor>(self->current_sender()), task_done{bench_step, 0, {}});
  if (++st.next == st.expected.size()) st.finish->done.set_value(steady::now());
}

caf::behavior consumer(caf::stateful_actor<consumer_state>* self, std::vector<action> expected,
                       std::shared_ptr<finish_line> finish) {
  self->state.expected = std::move(expected);
  self->state.finish = std::move(finish);
  return {
      [=](run_forward& r) { take(self, op::forward, r.task.microbatch, r.task.chunk); },
      [=](run_backward& r) { take(self, r.kind, r.task.microbatch, r.task.chunk); },
  };
}

// ---- (a) the current design: every arrival into a task_queue ------------------------------------------

struct queue_state {
  std::vector<action> actions;
  caf::actor processor;
  task_queue queue;
  bool running = false;
  std::size_t cursor = 0;
  int in_flight = 0;
  static inline const char* name = "queue_retriever";
};
using queue_actor = caf::stateful_actor<queue_state>;

void dispatch(queue_actor* self) {
  auto& st = self->state;
  while (st.running && st.in_flight < max_in_flight && st.cursor < st.actions.size()) {
    const action& a = st.actions[st.cursor];
    if (!st.queue.ready(a, bench_step)) return;
    ++st.cursor;
    ++st.in_flight;
    pending_task task = st.queue.take(a, bench_step);
    if (auto* t = std::get_if<forward_task>(&task)) self->send(st.processor, run_forward{std::move(*t)});
    else self->send(st.processor, run_backward{a.kind, std::get<backward_task>(std::move(task))});
  }
}

caf::behavior queue_retriever(queue_actor* self, std::vector<action> actions, caf::actor processor) {
  self->state.actions = std::move(actions);
  self->state.processor = std::move(processor);
  return {
      [=](forward_task& t) {
        self->state.queue.put(std::move(t));
        dispatch(self);
      },
      [=](backward_task& t) {
        self->state.queue.put(std::move(t));
        dispatch(self);
      },
      [=](begin_atom, std::uint64_t) {
        self->state.running = true;
        dispatch(self);
      },
      [=](task_done&) {
        --self->state.in_flight;
        dispatch(self);
      },
  };
}

// ---- (b) the mailbox as the queue: caf::skip ------------------------------------------------------------

struct skip_state {
  std::vector<action> actions;
  caf::actor processor;
  std::shared_ptr<finish_line> finish;
  bool running = false;
  std::size_t cursor = 0;
  int in_flight = 0;
  static inline const char* name = "skip_retriever";
};
using skip_actor = caf::stateful_actor<skip_state>;

template <class Task>
bool wanted(const skip_state& st, const Task& t, bool forward) {
  ++st.finish->offers;
  if (!st.running || st.in_flight >= max_in_flight || st.cursor >= st.actions.size()) return false;
  const action& a = st.actions[st.cursor];
  return (a.kind == op::forward) == forward && t.step == bench_step && t.microbatch == a.microbatch &&
         t.chunk == a.chunk;
}

caf::behavior skip_retriever(skip_actor* self, std::vector<action> actions, caf::actor processor,
                             std::shared_ptr<finish_line> finish) {
  self->state.actions = std::move(actions);
  self->state.processor = std::move(processor);
  self->state.finish = std::move(finish);
  return {
      [=](forward_task& t) -> caf::result<void> {
        auto& st = self->state;
        if (!wanted(st, t, true)) return caf::skip;
        ++st.cursor, ++st.in_flight;
        self->send(st.processor, run_forward{std::move(t)});
        return caf::unit;
      },
      [=](backward_task& t) -> caf::result<void> {
        auto& st = self->state;
        if (!wanted(st, t, false)) return caf::skip;
        const op kind = st.actions[st.cursor].kind;
        ++st.cursor, ++st.in_flight;
        self->send(st.processor, run_backward{kind, std::move(t)});
        return caf::unit;
      },
      [=](begin_atom, std::uint64_t) {
        // What a stage log would list as waiting: the skipped tasks sit in the normal queue's cache
        // (scheduled_actor::get_normal_queue(), public but undocumented; tasks not yet offered are not there).
        std::size_t waiting = 0;
        for (auto& x : self->get_normal_queue().cache())
          if (x.content().match_elements<forward_task>() || x.content().match_elements<backward_task>()) ++waiting;
        self->state.finish->waiting_seen = waiting;
        self->state.running = true;
      },
      [=](task_done&) { --self->state.in_flight; },
  };
}

// ---- one round ----------------------------------------------------------------------------------------

enum class design { queue, skip };
enum class arrival { scrambled, reverse, in_order };
const char* name_of(arrival a) {
  return a == arrival::scrambled ? "scrambled" : a == arrival::reverse ? "reverse" : "in order";
}

std::vector<std::size_t> arrival_order(std::size_t n, arrival a, unsigned seed) {
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  if (a == arrival::reverse) std::reverse(order.begin(), order.end());
  if (a == arrival::scrambled) std::shuffle(order.begin(), order.end(), std::mt19937(seed));
  return order;
}

struct round_result {
  double ns_per_task = 0.0;
  std::size_t waiting_seen = 0;
  double offers_per_task = 0.0;
};

round_result run_round(caf::actor_system& sys, design d, const std::vector<action>& actions,
                       const std::vector<std::size_t>& order) {
  auto finish = std::make_shared<finish_line>();
  auto done = finish->done.get_future();
  auto processor = sys.spawn(consumer, actions, finish);
  caf::actor retriever = d == design::queue ? sys.spawn(queue_retriever, actions, processor)
                                            : sys.spawn(skip_retriever, actions, processor, finish);
  // The tasks are built here, outside the timed part; the source only moves them into messages.
  auto tasks = std::make_shared<std::vector<pending_task>>();
  for (std::size_t i : order) {
    const action& a = actions[i];
    tensor data = tensor::from_shape({1, 1});
    if (a.kind == op::forward) tasks->push_back(forward_task{bench_step, a.microbatch, a.chunk, 0, 0, std::move(data)});
    else tasks->push_back(backward_task{bench_step, a.microbatch, a.chunk, 0, 0, std::move(data)});
  }
  auto start = std::make_shared<steady::time_point>();
  std::promise<void> started;
  auto sent = started.get_future();
  sys.spawn([=, &started](caf::event_based_actor* self) {
    *start = steady::now();
    for (auto& t : *tasks) std::visit([&](auto& task) { self->send(retriever, std::move(task)); }, t);
    self->send(retriever, begin_atom::value, bench_step);
    started.set_value();
  });
  sent.wait();
  const steady::time_point end = done.get();
  caf::anon_send_exit(retriever, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(processor, caf::exit_reason::user_shutdown);
  if (!finish->in_order) {
    std::fprintf(stderr, "bench_mailbox_queue: %s handed tasks out of schedule order\n",
                 d == design::queue ? "queue" : "skip");
    std::exit(1);
  }
  const auto n = static_cast<double>(actions.size());
  return {std::chrono::duration<double, std::nano>(end - *start).count() / n, finish->waiting_seen,
          static_cast<double>(finish->offers) / n};
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

std::string load_average() {
  std::ifstream in("/proc/loadavg");
  std::string one, five, fifteen;
  in >> one >> five >> fifteen;
  return one + " " + five + " " + fifteen;
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 101, warmup = 5;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--rounds" && i + 1 < argc) rounds = std::atoi(argv[++i]);
    else if (arg == "--warmup" && i + 1 < argc) warmup = std::atoi(argv[++i]);
    else {
      std::fprintf(stderr, "usage: bench_mailbox_queue [--rounds R] [--warmup W]\n");
      return 2;
    }
  }
  caf::actor_system_config cfg;
  configure_scheduler(cfg);
  caf::actor_system sys{cfg};
  std::printf("bench_mailbox_queue: %d rounds (+%d warm-up) per point, load average %s\n", rounds, warmup,
              load_average().c_str());
  std::printf("%-10s %5s %14s %14s %11s %13s %12s\n", "arrival", "N", "queue ns/task", "skip ns/task", "skip/queue",
              "offers/task", "skip listed");
  for (arrival a : {arrival::scrambled, arrival::reverse, arrival::in_order}) {
    for (int n : {8, 32, 128, 512}) {
      const std::vector<action> actions = schedule_of(n);
      std::vector<double> queue_ns, skip_ns, offers;
      std::size_t listed = 0;
      for (int r = 0; r < warmup + rounds; ++r) {
        const auto order = arrival_order(actions.size(), a, static_cast<unsigned>(1000 * n + r));
        const round_result q = run_round(sys, design::queue, actions, order);
        const round_result s = run_round(sys, design::skip, actions, order);
        if (r < warmup) continue;
        queue_ns.push_back(q.ns_per_task);
        skip_ns.push_back(s.ns_per_task);
        offers.push_back(s.offers_per_task);
        listed = s.waiting_seen;
      }
      const double mq = median(queue_ns), ms = median(skip_ns);
      std::printf("%-10s %5d %14.0f %14.0f %11.2f %13.1f %7zu of %-3d\n", name_of(a), n, mq, ms, ms / mq,
                  median(offers), listed, n);
      std::fflush(stdout);
    }
  }
  std::printf("load average after: %s\n", load_average().c_str());
  return 0;
}

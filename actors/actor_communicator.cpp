#include "actors/actor_communicator.hpp"

#include <deque>
#include <map>
#include <string>
#include <utility>

#include "network/error_text.hpp"

namespace ap {
namespace {

enum kind : int { forward_kind = 0, backward_kind = 1, plain_kind = 2 };
const char* kind_name(int k) { return k == forward_kind ? "forward" : k == backward_kind ? "backward" : "tensor"; }

// ---- inbox -------------------------------------------------------------------------------------------

struct waiter {
  std::uint64_t id;
  caf::response_promise promise;
};

struct inbox_state {
  std::map<std::pair<int, int>, std::deque<caf::message>> held;  // (kind, source) -> arrived, in order
  std::map<std::pair<int, int>, std::deque<waiter>> waiting;     // (kind, source) -> blocked receivers
  std::uint64_t next_id = 0;
  static inline const char* name = "inbox";
};

void arrive(caf::stateful_actor<inbox_state>* self, int k, int source, caf::message m) {
  auto& w = self->state.waiting[{k, source}];
  if (!w.empty()) {
    w.front().promise.deliver(std::move(m));
    w.pop_front();
  } else {
    self->state.held[{k, source}].push_back(std::move(m));
  }
}

caf::behavior inbox(caf::stateful_actor<inbox_state>* self) {
  return {
      [=](forward_task& t) { const int s = t.source; arrive(self, forward_kind, s, caf::make_message(std::move(t))); },
      [=](backward_task& t) {
        const int s = t.source;
        arrive(self, backward_kind, s, caf::make_message(std::move(t)));
      },
      [=](tensor_message& t) { const int s = t.source; arrive(self, plain_kind, s, caf::make_message(std::move(t))); },
      [=](take_atom, int k, int source, int timeout_ms) -> caf::response_promise {
        auto rp = self->make_response_promise();
        auto& held = self->state.held[{k, source}];
        if (!held.empty()) {
          rp.deliver(std::move(held.front()));
          held.pop_front();
          return rp;
        }
        const auto id = self->state.next_id++;
        self->state.waiting[{k, source}].push_back(waiter{id, rp});
        self->delayed_send(self, std::chrono::milliseconds(timeout_ms), expire_atom::value, k, source, id);
        return rp;
      },
      [=](expire_atom, int k, int source, std::uint64_t id) {
        auto& w = self->state.waiting[{k, source}];
        for (auto it = w.begin(); it != w.end(); ++it)
          if (it->id == id) {
            it->promise.deliver(caf::make_error(caf::sec::request_timeout, std::string("timed out")));
            w.erase(it);
            return;
          }
      },
  };
}

// ---- barrier -----------------------------------------------------------------------------------------

struct barrier_state {
  std::vector<caf::response_promise> arrived;
  std::uint64_t round = 0;
  static inline const char* name = "barrier";
};

caf::behavior barrier(caf::stateful_actor<barrier_state>* self, int world_size, std::chrono::milliseconds timeout) {
  return {
      [=](barrier_atom, int) -> caf::response_promise {
        auto rp = self->make_response_promise();
        auto& st = self->state;
        if (st.arrived.empty()) self->delayed_send(self, timeout, expire_atom::value, st.round);
        st.arrived.push_back(rp);
        if (static_cast<int>(st.arrived.size()) == world_size) {
          for (auto& p : st.arrived) p.deliver(ok_atom::value);
          st.arrived.clear();
          ++st.round;
        }
        return rp;
      },
      [=](expire_atom, std::uint64_t round) {
        auto& st = self->state;
        if (round != st.round) return;
        const std::string why = std::to_string(st.arrived.size()) + " of " + std::to_string(world_size) +
                                " ranks arrived";
        for (auto& p : st.arrived) p.deliver(caf::make_error(caf::sec::request_timeout, why));
        st.arrived.clear();
        ++st.round;
      },
  };
}

}  // namespace

caf::actor spawn_inbox(caf::actor_system& system) { return system.spawn(inbox); }
caf::actor spawn_barrier(caf::actor_system& system, int world_size, std::chrono::milliseconds timeout) {
  return system.spawn(barrier, world_size, timeout);
}

// ---- actor_communicator ------------------------------------------------------------------------------

actor_communicator::actor_communicator(caf::actor_system& system, int rank, std::vector<caf::actor> endpoints,
                                       caf::actor barrier, std::chrono::milliseconds timeout)
    : system_(system), rank_(rank), endpoints_(std::move(endpoints)), barrier_(std::move(barrier)), timeout_(timeout) {
  check_rank(rank, "construct");
}

void actor_communicator::check_open(const char* operation) const {
  if (closed_)
    throw std::logic_error("communicator of rank " + std::to_string(rank_) + ": " + operation + " after shutdown");
}

void actor_communicator::check_rank(int r, const char* operation) const {
  if (r < 0 || r >= world_size())
    throw std::out_of_range("communicator of rank " + std::to_string(rank_) + ": " + operation + " with rank " +
                            std::to_string(r) + ", valid ranks are 0.." + std::to_string(world_size() - 1));
}

const caf::actor& actor_communicator::endpoint(int r) const {
  check_rank(r, "endpoint");
  return endpoints_[static_cast<std::size_t>(r)];
}

void actor_communicator::send_forward(forward_task&& task, int destination) {
  check_open("send_forward");
  check_rank(destination, "send_forward");
  task.source = rank_;
  caf::anon_send(endpoints_[static_cast<std::size_t>(destination)], std::move(task));
}

void actor_communicator::send_backward(backward_task&& task, int destination) {
  check_open("send_backward");
  check_rank(destination, "send_backward");
  task.source = rank_;
  caf::anon_send(endpoints_[static_cast<std::size_t>(destination)], std::move(task));
}

void actor_communicator::send(tensor&& t, int destination) {
  check_open("send");
  check_rank(destination, "send");
  caf::anon_send(endpoints_[static_cast<std::size_t>(destination)], tensor_message{rank_, std::move(t)});
}

// Note [typed replies]: the inbox answers with the stored message (a forward_task, backward_task or
// tensor_message). A blocking receive in CAF 0.17 matches replies by type: a `caf::message&` handler is
// not a catch-all, so the reply must be taken as the concrete T (by mutable reference, so the tensor is
// moved out of the reply without a copy).
template <class T>
T actor_communicator::take(int k, int source) {
  caf::scoped_actor self{system_};
  T result;
  caf::error failure;
  // The inbox expires the wait itself after timeout_ (so nothing that arrives later is lost), and an inbox
  // that is gone answers at once (request_receiver_down). This guard is only for an inbox alive but starved
  // of CPU: a tensor it hands to a request given up here is lost, so the guard is long. (With one second, a
  // sanitizer run at load 16 starved the inbox past it once and lost a tensor.)
  self->request(endpoints_[static_cast<std::size_t>(rank_)], timeout_ + std::chrono::seconds(30), take_atom::value,
                k, source, static_cast<int>(timeout_.count()))
      .receive([&](T& x) { result = std::move(x); }, [&](caf::error& e) { failure = std::move(e); });
  if (failure) {
    const std::string where = "communicator of rank " + std::to_string(rank_) + ": no " + kind_name(k) +
                              " tensor from rank " + std::to_string(source);
    if (failure == caf::sec::request_timeout)
      throw timeout_error(where + " within " + std::to_string(timeout_.count()) + " ms");
    throw std::runtime_error(where + ": " + error_text(failure));
  }
  return result;
}

forward_task actor_communicator::receive_forward(int source) {
  check_open("receive_forward");
  check_rank(source, "receive_forward");
  return take<forward_task>(forward_kind, source);
}

backward_task actor_communicator::receive_backward(int source) {
  check_open("receive_backward");
  check_rank(source, "receive_backward");
  return take<backward_task>(backward_kind, source);
}

tensor actor_communicator::receive(int source) {
  check_open("receive");
  check_rank(source, "receive");
  return take<tensor_message>(plain_kind, source).data;
}

void actor_communicator::barrier() {
  check_open("barrier");
  caf::scoped_actor self{system_};
  caf::error failure;
  self->request(barrier_, timeout_ + std::chrono::seconds(1), barrier_atom::value, rank_)
      .receive([&](ok_atom) {}, [&](caf::error& e) { failure = std::move(e); });
  if (failure)
    throw timeout_error("communicator of rank " + std::to_string(rank_) + ": barrier not reached within " +
                        std::to_string(timeout_.count()) + " ms (" + error_text(failure) + ")");
}

// ---- local_world -------------------------------------------------------------------------------------

local_world::local_world(caf::actor_system& system, int world_size, std::chrono::milliseconds timeout) {
  if (world_size <= 0) throw std::invalid_argument("local_world: world size must be positive, got " +
                                                   std::to_string(world_size));
  for (int r = 0; r < world_size; ++r) inboxes_.push_back(spawn_inbox(system));
  barrier_ = spawn_barrier(system, world_size, timeout);
  for (int r = 0; r < world_size; ++r)
    ranks_.push_back(std::make_unique<actor_communicator>(system, r, inboxes_, barrier_, timeout));
}

local_world::~local_world() {
  for (auto& r : ranks_) r->shutdown();
  for (auto& a : inboxes_) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(barrier_, caf::exit_reason::user_shutdown);
}

}  // namespace ap

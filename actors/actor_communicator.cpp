#include "actors/actor_communicator.hpp"

#include <deque>
#include <exception>
#include <map>
#include <string>
#include <type_traits>
#include <utility>

#include "network/error_text.hpp"

namespace ap {
namespace {

enum kind : int { forward_kind = 0, backward_kind = 1, plain_kind = 2 };
const char* kind_name(int k) { return k == forward_kind ? "forward" : k == backward_kind ? "backward" : "tensor"; }

// ---- inbox -------------------------------------------------------------------------------------------

// A receive in flight at the inbox (Note [receive handles]): its id, and the actor that answers its handle.
struct waiter {
  std::uint64_t id;
  caf::actor receiver;
};

struct inbox_state {
  std::map<std::pair<int, int>, std::deque<caf::message>> held;  // (kind, source) -> arrived, in order
  std::map<std::pair<int, int>, std::deque<waiter>> waiting;     // (kind, source) -> receives in flight
  static inline const char* name = "inbox";
};

// Sends `m` (an arrival as the inbox keeps it) to `to` as a message of its own.
template <class Self>
void hand(Self* self, const caf::actor& to, caf::message m) {
  to->enqueue(caf::make_mailbox_element(self->ctrl(), caf::make_message_id(), {}, std::move(m)), self->context());
}

void arrive(caf::stateful_actor<inbox_state>* self, int k, int source, caf::message m) {
  auto& w = self->state.waiting[{k, source}];
  if (!w.empty()) {
    hand(self, w.front().receiver, std::move(m));
    w.pop_front();
  } else {
    self->state.held[{k, source}].push_back(std::move(m));
  }
}

// Removes the receive `id` of (kind, source); whether it was still waiting.
bool remove_waiter(caf::stateful_actor<inbox_state>* self, int k, int source, std::uint64_t id, caf::actor* receiver) {
  auto& w = self->state.waiting[{k, source}];
  for (auto it = w.begin(); it != w.end(); ++it)
    if (it->id == id) {
      *receiver = it->receiver;
      w.erase(it);
      return true;
    }
  return false;
}

caf::behavior inbox(caf::stateful_actor<inbox_state>* self) {
  return {
      [=](forward_task& t) { const int s = t.source; arrive(self, forward_kind, s, caf::make_message(std::move(t))); },
      [=](backward_task& t) {
        const int s = t.source;
        arrive(self, backward_kind, s, caf::make_message(std::move(t)));
      },
      [=](tensor_message& t) { const int s = t.source; arrive(self, plain_kind, s, caf::make_message(std::move(t))); },
      [=](take_atom, int k, int source, int timeout_ms, std::uint64_t id, caf::actor& receiver) {
        auto& held = self->state.held[{k, source}];
        if (!held.empty()) {
          hand(self, receiver, std::move(held.front()));
          held.pop_front();
          return;
        }
        self->state.waiting[{k, source}].push_back(waiter{id, std::move(receiver)});
        self->delayed_send(self, std::chrono::milliseconds(timeout_ms), expire_atom::value, k, source, id);
      },
      [=](expire_atom, int k, int source, std::uint64_t id) {
        caf::actor receiver;
        if (remove_waiter(self, k, source, id, &receiver)) self->send(receiver, expire_atom::value);
      },
      // Acknowledged cancellation: true if the receive was still waiting (it never gets anything now).
      [=](withdraw_atom, int k, int source, std::uint64_t id) -> bool {
        caf::actor receiver;
        if (!remove_waiter(self, k, source, id, &receiver)) return false;
        self->send(receiver, withdraw_atom::value);
        return true;
      },
  };
}

// ---- barrier -----------------------------------------------------------------------------------------

struct barrier_state {
  std::vector<waiter> arrived;  // this round's ranks, each with the actor that answers its handle
  std::uint64_t round = 0;
  static inline const char* name = "barrier";
};

caf::behavior barrier(caf::stateful_actor<barrier_state>* self, int world_size, std::chrono::milliseconds timeout) {
  return {
      [=](barrier_atom, int, std::uint64_t id, caf::actor& receiver) {
        auto& st = self->state;
        if (st.arrived.empty()) self->delayed_send(self, timeout, expire_atom::value, st.round);
        st.arrived.push_back(waiter{id, std::move(receiver)});
        if (static_cast<int>(st.arrived.size()) == world_size) {
          for (auto& w : st.arrived) self->send(w.receiver, ok_atom::value, st.round);
          st.arrived.clear();
          ++st.round;
        }
      },
      [=](expire_atom, std::uint64_t round) {
        auto& st = self->state;
        if (round != st.round || st.arrived.empty()) return;
        const std::string why = std::to_string(st.arrived.size()) + " of " + std::to_string(world_size) +
                                " ranks arrived";
        for (auto& w : st.arrived) self->send(w.receiver, expire_atom::value, why);
        st.arrived.clear();
        ++st.round;
      },
      [=](withdraw_atom, std::uint64_t id) -> bool {
        auto& arrived = self->state.arrived;
        for (auto it = arrived.begin(); it != arrived.end(); ++it)
          if (it->id == id) {
            self->send(it->receiver, withdraw_atom::value);
            arrived.erase(it);
            return true;
          }
        return false;
      },
  };
}

// ---- the actors behind the handles (Note [receive handles]) --------------------------------------------

template <class T>
using handle_state = std::shared_ptr<typename receive_handle<T>::state>;

template <class T>
void fail(const handle_state<T>& st, std::exception_ptr e) {
  st->finish(std::nullopt, std::move(e));
}

// Answers one receive's handle: the Reply the inbox hands it (as a T), its expiry, or a gone inbox.
template <class T, class Reply>
caf::behavior tensor_receiver(caf::event_based_actor* self, handle_state<T> st, caf::actor inbox, std::string where,
                              std::chrono::milliseconds timeout) {
  self->monitor(inbox);
  self->set_down_handler([=](caf::down_msg& m) {
    fail<T>(st, std::make_exception_ptr(std::runtime_error(where + ": its inbox is gone (" + caf::to_string(m.reason) + ")")));
    self->quit();
  });
  return {
      [=](Reply& x) {
        if constexpr (std::is_same_v<Reply, tensor_message>)
          st->finish(std::move(x.data), nullptr);
        else
          st->finish(std::move(x), nullptr);
        self->quit();
      },
      [=](expire_atom) {
        fail<T>(st, std::make_exception_ptr(timeout_error(where + " within " + std::to_string(timeout.count()) + " ms")));
        self->quit();
      },
      [=](withdraw_atom) { self->quit(); },  // cancel() was acknowledged: nothing comes
  };
}

caf::behavior barrier_receiver(caf::event_based_actor* self, handle_state<std::uint64_t> st, caf::actor barrier_actor,
                               std::string where) {
  self->monitor(barrier_actor);
  self->set_down_handler([=](caf::down_msg& m) {
    fail<std::uint64_t>(st, std::make_exception_ptr(std::runtime_error(where + ": the barrier is gone (" +
                                                                         caf::to_string(m.reason) + ")")));
    self->quit();
  });
  return {
      [=](ok_atom, std::uint64_t round) {
        st->finish(round, nullptr);
        self->quit();
      },
      [=](expire_atom, const std::string& why) {
        fail<std::uint64_t>(st, std::make_exception_ptr(timeout_error(where + " (" + why + ")")));
        self->quit();
      },
      [=](withdraw_atom) { self->quit(); },
  };
}

// Asks `target` to withdraw a receive; true when it acknowledged doing so. A target that does not answer in
// `limit` (or is gone) withdrew nothing: the handle then gets its answer from the receiving actor.
template <class... Ts>
bool withdraw(caf::actor_system& system, const caf::actor& target, std::chrono::milliseconds limit, Ts... xs) {
  caf::scoped_actor self{system};
  bool withdrawn = false;
  self->request(target, limit, withdraw_atom::value, xs...)
      .receive([&](bool b) { withdrawn = b; }, [&](caf::error&) { withdrawn = false; });
  return withdrawn;
}

// How long past its timeout a receive waits for its inbox or barrier to answer before withdrawing itself:
// they answer by themselves at the timeout, so only an actor starved of CPU for this long is given up on.
constexpr std::chrono::seconds answer_grace{30};

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

// Note [typed replies]: the inbox hands over the stored message (a forward_task, backward_task or
// tensor_message) as a message of its own; the receive's actor matches it as the concrete Reply (by mutable
// reference, so the tensor is moved out without a copy). The take is sent from the calling thread, so the
// inbox sees it before any cancel() of the same handle.
template <class T, class Reply>
receive_handle<T> actor_communicator::take_async(int k, int source) {
  const caf::actor& inbox = endpoints_[static_cast<std::size_t>(rank_)];
  auto st = std::make_shared<typename receive_handle<T>::state>();
  const std::string where = "communicator of rank " + std::to_string(rank_) + ": no " + kind_name(k) +
                            " tensor from rank " + std::to_string(source);
  const caf::actor receiver = system_.spawn(tensor_receiver<T, Reply>, st, inbox, where, timeout_);
  const std::uint64_t id = next_receive_++;
  caf::anon_send(inbox, take_atom::value, k, source, static_cast<int>(timeout_.count()), id, receiver);
  caf::actor_system& system = system_;
  const auto limit = timeout_ + answer_grace;
  return receive_handle<T>(std::move(st), [&system, inbox, limit, k, source, id] {
    return withdraw(system, inbox, limit, k, source, id);
  });
}

template <class T>
T actor_communicator::answer(receive_handle<T>& handle, const std::string& what) {
  if (auto value = handle.wait_for(timeout_ + answer_grace)) return std::move(*value);
  // The receiving actor answered neither the tensor nor its own expiry: starved of CPU. Withdraw the receive,
  // acknowledged, so the tensor cannot be handed to it once this call has given up.
  if (handle.cancel())
    throw timeout_error("communicator of rank " + std::to_string(rank_) + ": " + what + " within " +
                        std::to_string(timeout_.count()) + " ms (its receiving actor did not answer)");
  return handle.wait();  // answered after all: the tensor, or its failure
}

receive_handle<forward_task> actor_communicator::receive_forward_async(int source) {
  check_open("receive_forward");
  check_rank(source, "receive_forward");
  return take_async<forward_task, forward_task>(forward_kind, source);
}

receive_handle<backward_task> actor_communicator::receive_backward_async(int source) {
  check_open("receive_backward");
  check_rank(source, "receive_backward");
  return take_async<backward_task, backward_task>(backward_kind, source);
}

receive_handle<tensor> actor_communicator::receive_async(int source) {
  check_open("receive");
  check_rank(source, "receive");
  return take_async<tensor, tensor_message>(plain_kind, source);
}

forward_task actor_communicator::receive_forward(int source) {
  auto handle = receive_forward_async(source);
  return answer(handle, "no forward tensor from rank " + std::to_string(source));
}

backward_task actor_communicator::receive_backward(int source) {
  auto handle = receive_backward_async(source);
  return answer(handle, "no backward tensor from rank " + std::to_string(source));
}

tensor actor_communicator::receive(int source) {
  auto handle = receive_async(source);
  return answer(handle, "no tensor from rank " + std::to_string(source));
}

receive_handle<std::uint64_t> actor_communicator::barrier_async() {
  check_open("barrier");
  if (!barrier_) throw std::logic_error("communicator of rank " + std::to_string(rank_) + ": barrier without a barrier actor");
  auto st = std::make_shared<receive_handle<std::uint64_t>::state>();
  const std::string where = "communicator of rank " + std::to_string(rank_) + ": barrier not reached within " +
                            std::to_string(timeout_.count()) + " ms";
  const caf::actor receiver = system_.spawn(barrier_receiver, st, barrier_, where);
  const std::uint64_t id = next_receive_++;
  caf::anon_send(barrier_, barrier_atom::value, rank_, id, receiver);
  caf::actor_system& system = system_;
  const caf::actor target = barrier_;
  const auto limit = timeout_ + answer_grace;
  return receive_handle<std::uint64_t>(std::move(st), [&system, target, limit, id] {
    return withdraw(system, target, limit, id);
  });
}

void actor_communicator::barrier() {
  auto handle = barrier_async();
  answer(handle, "barrier not reached");
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

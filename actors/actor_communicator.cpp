#include "actors/actor_communicator.hpp"

#include <algorithm>
#include <deque>
#include <exception>
#include <map>
#include <mutex>
#include <string>
#include <type_traits>
#include <utility>

#include "network/error_text.hpp"

namespace ap {

// A receive in flight as its inbox or barrier keeps it (Note [receive handles]). The inbox (or barrier) fills
// the handle's state itself, so a receive is answered once and a withdrawn one never. Inboxes and barriers are
// local to their rank's process, so a slot travels as a pointer.
struct receive_slot {
  std::string where;  // names it in failures
  std::chrono::milliseconds timeout;
  receive_slot(std::string w, std::chrono::milliseconds t) : where(std::move(w)), timeout(t) {}
  virtual ~receive_slot() = default;
  virtual void deliver(caf::message& m) = 0;
  virtual void fail(std::exception_ptr e) = 0;
  void expire(const std::string& detail) {
    fail(std::make_exception_ptr(timeout_error(where + " within " + std::to_string(timeout.count()) + " ms" +
                                               (detail.empty() ? "" : " (" + detail + ")"))));
  }
};
using slot_ptr = std::shared_ptr<receive_slot>;

}  // namespace ap

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(ap::slot_ptr)

namespace ap {

// The unanswered receives of one communicator at one inbox or barrier. A functor attached to that actor fails
// them all when it exits; a receive asked afterwards fails at once.
struct pending_receives {
  std::mutex mutex;
  std::vector<std::weak_ptr<receive_slot>> slots;  // owned by their handles
  std::string gone;                                // empty while the actor lives

  void add(const slot_ptr& s) {
    std::string why;
    {
      std::lock_guard<std::mutex> lock(mutex);
      why = gone;
      if (why.empty()) {
        slots.erase(std::remove_if(slots.begin(), slots.end(), [](const auto& w) { return w.expired(); }), slots.end());
        slots.push_back(s);
      }
    }
    if (!why.empty()) s->fail(std::make_exception_ptr(std::runtime_error(s->where + ": " + why)));
  }
  void fail_all(const std::string& why) {
    std::vector<std::weak_ptr<receive_slot>> failed;
    {
      std::lock_guard<std::mutex> lock(mutex);
      gone = why;
      failed.swap(slots);
    }
    for (auto& w : failed)
      if (auto s = w.lock()) s->fail(std::make_exception_ptr(std::runtime_error(s->where + ": " + why)));
  }
};

namespace {

enum kind : int { forward_kind = 0, backward_kind = 1, plain_kind = 2 };
const char* kind_name(int k) {
  return k == forward_kind ? "forward tensor" : k == backward_kind ? "backward tensor" : "tensor";
}

// A receive answered as a T moved out of the inbox's stored Reply, or from the barrier's round. The handle owns
// the slot through its state, so a slot whose take was never handled stays alive for the functor that fails it.
template <class T, class Reply>
struct slot_for final : receive_slot {
  typename receive_handle<T>::state state;
  using receive_slot::receive_slot;
  void deliver(caf::message& m) override {
    auto& x = m.get_mutable_as<Reply>(0);
    if constexpr (std::is_same_v<Reply, tensor_message>)
      state.finish(std::move(x.data), nullptr);
    else
      state.finish(std::move(x), nullptr);
  }
  void fail(std::exception_ptr e) override { state.finish(std::nullopt, std::move(e)); }
};

// A new receive's slot, and its handle's state owned through it.
template <class T, class Reply>
std::pair<slot_ptr, std::shared_ptr<typename receive_handle<T>::state>> make_slot(std::string where,
                                                                                   std::chrono::milliseconds timeout) {
  auto slot = std::make_shared<slot_for<T, Reply>>(std::move(where), timeout);
  std::shared_ptr<typename receive_handle<T>::state> state(slot, &slot->state);
  return {std::move(slot), std::move(state)};
}

// ---- inbox

struct waiter {
  std::uint64_t id;
  slot_ptr slot;
};

struct inbox_state {
  std::map<std::pair<int, int>, std::deque<caf::message>> held;  // (kind, source) -> arrived, in order
  std::map<std::pair<int, int>, std::deque<waiter>> waiting;     // (kind, source) -> receives in flight
  static inline const char* name = "inbox";
};

void arrive(caf::stateful_actor<inbox_state>* self, int k, int source, caf::message m) {
  auto& w = self->state.waiting[{k, source}];
  if (!w.empty()) {
    w.front().slot->deliver(m);
    w.pop_front();
  } else {
    self->state.held[{k, source}].push_back(std::move(m));
  }
}

// Removes the receive `id` of (kind, source); its slot if it was still waiting.
slot_ptr remove_waiter(caf::stateful_actor<inbox_state>* self, int k, int source, std::uint64_t id) {
  auto& w = self->state.waiting[{k, source}];
  for (auto it = w.begin(); it != w.end(); ++it)
    if (it->id == id) {
      slot_ptr s = std::move(it->slot);
      w.erase(it);
      return s;
    }
  return nullptr;
}

caf::behavior inbox(caf::stateful_actor<inbox_state>* self) {
  return {
      [=](forward_task& t) { const int s = t.source; arrive(self, forward_kind, s, caf::make_message(std::move(t))); },
      [=](backward_task& t) {
        const int s = t.source;
        arrive(self, backward_kind, s, caf::make_message(std::move(t)));
      },
      [=](tensor_message& t) { const int s = t.source; arrive(self, plain_kind, s, caf::make_message(std::move(t))); },
      [=](take_atom, int k, int source, std::uint64_t id, slot_ptr& slot) {
        auto& held = self->state.held[{k, source}];
        if (!held.empty()) {
          slot->deliver(held.front());
          held.pop_front();
          return;
        }
        self->delayed_send(self, slot->timeout, expire_atom::value, k, source, id);
        self->state.waiting[{k, source}].push_back(waiter{id, std::move(slot)});
      },
      [=](expire_atom, int k, int source, std::uint64_t id) {
        if (auto s = remove_waiter(self, k, source, id)) s->expire("");
      },
      // Acknowledged cancellation: true if the receive was still waiting (it never gets anything now).
      [=](withdraw_atom, int k, int source, std::uint64_t id) -> bool {
        return remove_waiter(self, k, source, id) != nullptr;
      },
  };
}

// ---- barrier

struct barrier_state {
  std::vector<waiter> arrived;  // this round's ranks, each with its receive
  std::uint64_t round = 0;
  static inline const char* name = "barrier";
};

caf::behavior barrier(caf::stateful_actor<barrier_state>* self, int world_size, std::chrono::milliseconds timeout) {
  return {
      [=](barrier_atom, int, std::uint64_t id, slot_ptr& slot) {
        auto& st = self->state;
        if (st.arrived.empty()) self->delayed_send(self, timeout, expire_atom::value, st.round);
        st.arrived.push_back(waiter{id, std::move(slot)});
        if (static_cast<int>(st.arrived.size()) == world_size) {
          auto passed = caf::make_message(st.round);
          for (auto& w : st.arrived) w.slot->deliver(passed);
          st.arrived.clear();
          ++st.round;
        }
      },
      [=](expire_atom, std::uint64_t round) {
        auto& st = self->state;
        if (round != st.round || st.arrived.empty()) return;
        const std::string why = std::to_string(st.arrived.size()) + " of " + std::to_string(world_size) +
                                " ranks arrived";
        for (auto& w : st.arrived) w.slot->expire(why);
        st.arrived.clear();
        ++st.round;
      },
      [=](withdraw_atom, std::uint64_t id) -> bool {
        auto& arrived = self->state.arrived;
        for (auto it = arrived.begin(); it != arrived.end(); ++it)
          if (it->id == id) {
            arrived.erase(it);
            return true;
          }
        return false;
      },
  };
}

// Asks `target` to withdraw a receive; true when acknowledged. A target silent past `limit` withdrew nothing.
template <class... Ts>
bool withdraw(caf::actor_system& system, const caf::actor& target, std::chrono::milliseconds limit, Ts... xs) {
  caf::scoped_actor self{system};
  bool withdrawn = false;
  self->request(target, limit, withdraw_atom::value, xs...)
      .receive([&](bool b) { withdrawn = b; }, [&](caf::error&) { withdrawn = false; });
  return withdrawn;
}

// Fails the receives of `pending` when `target` exits (Note [receive handles]).
void watch(const caf::actor& target, const std::shared_ptr<pending_receives>& pending, const char* what) {
  if (!target) return;
  // No reason in the text: an exiting actor's reason is not safe to render from here.
  const std::string why = std::string("its ") + what + " is gone";
  target->attach_functor([pending, why] { pending->fail_all(why); });
}

// How long past its timeout a blocking receive waits before withdrawing itself; inboxes and barriers answer at
// the timeout, so only an actor starved of CPU this long is given up on.
constexpr std::chrono::seconds answer_grace{30};

}  // namespace

caf::actor spawn_inbox(caf::actor_system& system) { return system.spawn(inbox); }
caf::actor spawn_barrier(caf::actor_system& system, int world_size, std::chrono::milliseconds timeout) {
  return system.spawn(barrier, world_size, timeout);
}

// ---- actor_communicator

actor_communicator::actor_communicator(caf::actor_system& system, int rank, std::vector<caf::actor> endpoints,
                                       caf::actor barrier, std::chrono::milliseconds timeout)
    : system_(system),
      rank_(rank),
      endpoints_(std::move(endpoints)),
      barrier_(std::move(barrier)),
      timeout_(timeout),
      inbox_pending_(std::make_shared<pending_receives>()),
      barrier_pending_(std::make_shared<pending_receives>()) {
  check_rank(rank, "construct");
  watch(endpoints_[static_cast<std::size_t>(rank_)], inbox_pending_, "inbox");
  watch(barrier_, barrier_pending_, "barrier");
}

actor_communicator::~actor_communicator() = default;

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

// Note [typed replies]: the inbox keeps each arrival as the message it came in; the receive's slot takes it as
// that concrete type by mutable reference, so the tensor is moved out without a copy. The take is sent from the
// calling thread, so the inbox sees it before any cancel() of the same handle.
template <class T, class Reply>
receive_handle<T> actor_communicator::take_async(int k, int source) {
  const caf::actor& inbox = endpoints_[static_cast<std::size_t>(rank_)];
  auto [slot, st] = make_slot<T, Reply>("communicator of rank " + std::to_string(rank_) + ": no " + kind_name(k) +
                                             " from rank " + std::to_string(source),
                                         timeout_);
  inbox_pending_->add(slot);
  const std::uint64_t id = next_receive_++;
  caf::anon_send(inbox, take_atom::value, k, source, id, std::move(slot));
  caf::actor_system& system = system_;
  const auto limit = timeout_ + answer_grace;
  return receive_handle<T>(std::move(st), [&system, inbox, limit, k, source, id] {
    return withdraw(system, inbox, limit, k, source, id);
  });
}

template <class T>
T actor_communicator::answer(receive_handle<T>& handle, const std::string& what) {
  if (auto value = handle.wait_for(timeout_ + answer_grace)) return std::move(*value);
  // Neither the tensor nor the expiry came: starved of CPU. Withdraw, acknowledged, so the tensor cannot be handed
  // to this receive once the call has given up.
  if (handle.cancel())
    throw timeout_error("communicator of rank " + std::to_string(rank_) + ": " + what + " within " +
                        std::to_string(timeout_.count()) + " ms (its inbox did not answer)");
  return handle.wait();
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
  auto [slot, st] = make_slot<std::uint64_t, std::uint64_t>(
      "communicator of rank " + std::to_string(rank_) + ": barrier not reached", timeout_);
  barrier_pending_->add(slot);
  const std::uint64_t id = next_receive_++;
  caf::anon_send(barrier_, barrier_atom::value, rank_, id, std::move(slot));
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

// ---- local_world

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

// The sender of a stage: delivers finished tasks through the communicator, off the processor's thread; on a
// node, a large tensor for a stage of another process goes on its activation link first (Note [activations on
// data links] in network/activation_links.hpp).
#include <algorithm>
#include <memory>

#include "actors/actor_communicator.hpp"
#include "actors/pipeline_actors.hpp"
#include "network/guarded_transport.hpp"

namespace ap {
namespace {

struct sender_state {
  std::function<void(const std::string&)> log;  // may be empty
  std::unique_ptr<actor_communicator> comm;
  std::vector<std::string> links;  // per rank: its activation link, "" for none
  std::unique_ptr<activation_outbox> outbox;
  static inline const char* name = "sender";
};

using sender_self = sender_actor::stateful_pointer<sender_state>;

// Writes a large tensor on the link to `destination` and leaves its ticket in the task; where there is no link,
// or it fails (the tensor then goes inside the message: a dead stage is CAF's to name), leaves the task as it was.
template <class Task>
void send_beside(sender_self self, Task& t, int destination) {
  auto& st = self->state;
  const auto d = static_cast<std::size_t>(destination);
  if (!st.outbox || d >= st.links.size() || st.links[d].empty() || t.data.byte_size() < inline_bytes) return;
  const std::uint64_t ticket = st.outbox->next_ticket();
  try {
    st.outbox->send(destination, st.links[d], ticket, t.step, std::move(t.data));
  } catch (const link_error& e) {
    if (st.log) st.log(std::string(e.what()) + "; the tensor goes inside its message (the next one opens the link again)");
    return;
  }
  t.ticket = ticket;
  t.data = tensor();
}

sender_actor::behavior_type sender(sender_self self, int stage, std::chrono::milliseconds timeout,
                                   std::function<void(const std::string&)> log) {
  self->state.log = std::move(log);
  return {
      // Acknowledged for remote stages. Links only between processes: in one process `links` is empty.
      [=](setup_atom, const std::vector<caf::actor>& endpoints, std::vector<std::string>& links) -> ok_atom {
        auto& st = self->state;
        st.comm = std::make_unique<actor_communicator>(self->system(), stage, endpoints, caf::actor{}, timeout);
        st.links = std::move(links);
        if (std::any_of(st.links.begin(), st.links.end(), [](const std::string& l) { return !l.empty(); }))
          st.outbox = std::make_unique<activation_outbox>(stage, transport_tls_of(self->system()), timeout);
        return ok_atom::value;
      },
      [=](deliver_forward& d) {
        send_beside(self, d.task, d.destination);
        self->state.comm->send_forward(std::move(d.task), d.destination);
      },
      [=](deliver_backward& d) {
        send_beside(self, d.task, d.destination);
        self->state.comm->send_backward(std::move(d.task), d.destination);
      },
  };
}

}  // namespace

sender_actor spawn_sender(caf::actor_system& system, int stage, std::chrono::milliseconds timeout,
                          std::function<void(const std::string&)> log) {
  return system.spawn(sender, stage, timeout, std::move(log));
}

}  // namespace ap

// The sender of a stage: delivers finished tasks off the processor's thread; large tensors to other processes go
// on activation links (Note [activations on data links]).
#include <memory>

#include "actors/actor_communicator.hpp"
#include "actors/pipeline_actors.hpp"
#include "actors/send_beside.hpp"
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

sender_actor::behavior_type sender(sender_self self, int stage, std::chrono::milliseconds timeout,
                                   std::function<void(const std::string&)> log) {
  self->state.log = std::move(log);
  return {
      // Acknowledged for remote stages. Links only between processes: in one process `links` is empty.
      [=](setup_atom, const std::vector<caf::actor>& endpoints, std::vector<std::string>& links) -> ok_atom {
        auto& st = self->state;
        st.comm = std::make_unique<actor_communicator>(self->system(), stage, endpoints, caf::actor{}, timeout);
        st.links = std::move(links);
        st.outbox = outbox_for(stage, st.links, transport_tls_of(self->system()), timeout);
        return ok_atom::value;
      },
      [=](deliver_forward& d) {
        send_beside(self->state.outbox.get(), self->state.links, d.task, d.destination, self->state.log);
        self->state.comm->send_forward(std::move(d.task), d.destination);
      },
      [=](deliver_backward& d) {
        send_beside(self->state.outbox.get(), self->state.links, d.task, d.destination, self->state.log);
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

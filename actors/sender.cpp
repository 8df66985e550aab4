// The sender of a stage: delivers finished tasks through the communicator, off the processor's thread.
#include <memory>

#include "actors/actor_communicator.hpp"
#include "actors/pipeline_actors.hpp"

namespace ap {
namespace {

struct sender_state {
  std::unique_ptr<actor_communicator> comm;
  static inline const char* name = "sender";
};

sender_actor::behavior_type sender(sender_actor::stateful_pointer<sender_state> self, int stage,
                                   std::chrono::milliseconds timeout) {
  return {
      [=](setup_atom, const std::vector<caf::actor>& endpoints) -> ok_atom {  // acknowledged for remote stages
        self->state.comm = std::make_unique<actor_communicator>(self->system(), stage, endpoints, caf::actor{}, timeout);
        return ok_atom::value;
      },
      [=](deliver_forward& d) { self->state.comm->send_forward(std::move(d.task), d.destination); },
      [=](deliver_backward& d) { self->state.comm->send_backward(std::move(d.task), d.destination); },
  };
}

}  // namespace

sender_actor spawn_sender(caf::actor_system& system, int stage, std::chrono::milliseconds timeout) {
  return system.spawn(sender, stage, timeout);
}

}  // namespace ap

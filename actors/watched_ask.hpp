// Asking an actor that may live on another node, and waiting for its answer.
#pragma once

#include <chrono>
#include <string>
#include <utility>

#include <caf/all.hpp>

namespace ap {

// Note [answers from other nodes]: in CAF 0.17 a request pending on an actor whose node's connection goes is
// answered only at its timeout (no error comes when the connection goes), so a lost node would cost a whole
// --timeout-ms. ask_watched sends the message instead (the answer comes back as a message), monitors the actor,
// and ends its wait at the answer, the actor's down message, an error, or the timeout, whichever comes first.
struct watched_wait {
  enum class outcome { answered, gone, error, timed_out };
  outcome result = outcome::answered;
  caf::error reason;  // gone: the down message's reason; error: the error
  std::chrono::steady_clock::time_point sent;
  bool answered() const { return result == outcome::answered; }
  // The error of an unanswered wait (a timeout: caf::sec::request_timeout).
  caf::error failure() const { return result == outcome::timed_out ? caf::make_error(caf::sec::request_timeout) : reason; }
};

// Sends `xs...` to `whom` and runs `on_answer` (a handler of the answer's types) on its answer.
template <class Actor, class OnAnswer, class... Ts>
watched_wait ask_watched(caf::scoped_actor& self, const Actor& whom, std::chrono::milliseconds timeout,
                         OnAnswer on_answer, Ts&&... xs) {
  watched_wait w;
  w.sent = std::chrono::steady_clock::now();
  const caf::actor_addr address = whom.address();
  self->monitor(whom);
  self->send(whom, std::forward<Ts>(xs)...);
  for (bool done = false; !done;) {
    bool other = false;  // the down message of an actor monitored earlier: wait on
    self->receive(
        on_answer,
        [&](const caf::down_msg& m) {
          if (m.source != address) other = true;
          else w.result = watched_wait::outcome::gone, w.reason = m.reason;
        },
        [&](caf::error& e) { w.result = watched_wait::outcome::error, w.reason = std::move(e); },
        caf::after(timeout) >> [&] { w.result = watched_wait::outcome::timed_out; });
    done = !other;  // the answer (result stays `answered`), or why none comes
  }
  self->demonitor(address);
  return w;
}

}  // namespace ap

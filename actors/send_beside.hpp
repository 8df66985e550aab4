// A task's large tensor written on its destination's activation link, the task carrying its ticket
// (Note [activations on data links]).
#pragma once

#include <algorithm>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "network/activation_links.hpp"

namespace ap {

// Writes `t.data` on links[destination] and leaves its ticket in the task. Without a link, below inline_bytes, or
// when the link fails (`log` hears why), the task stays as it was and the tensor goes in the message.
template <class Task>
void send_beside(activation_outbox* outbox, const std::vector<std::string>& links, Task& t, int destination,
                 const std::function<void(const std::string&)>& log) {
  const auto d = static_cast<std::size_t>(destination);
  if (!outbox || destination < 0 || d >= links.size() || links[d].empty() || t.data.byte_size() < inline_bytes) return;
  const std::uint64_t ticket = outbox->next_ticket();
  try {
    outbox->send(destination, links[d], ticket, t.step, std::move(t.data));
  } catch (const link_error& e) {
    if (log) log(std::string(e.what()) + "; the tensor goes inside its message (the next one opens the link again)");
    return;
  }
  t.ticket = ticket;
  t.data = tensor();
}

// An outbox for `sender` (a stage's rank, or the coordinator's) where any of `links` is set, else none.
inline std::unique_ptr<activation_outbox> outbox_for(int sender, const std::vector<std::string>& links,
                                                     std::shared_ptr<tls_context> tls, std::chrono::milliseconds timeout) {
  if (std::none_of(links.begin(), links.end(), [](const std::string& l) { return !l.empty(); })) return nullptr;
  return std::make_unique<activation_outbox>(sender, std::move(tls), timeout);
}

}  // namespace ap

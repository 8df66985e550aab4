// The CAF messages of a ring_group: a rank giving up, and the greeting that checks a peer's rank.
#pragma once

#include <cstdint>
#include <string>

#include <caf/all.hpp>

namespace ap {

// Rank `from` aborted the group: every unfinished collective fails, naming it and `reason`.
struct ring_abort {
  std::int32_t from = 0;
  std::string reason;
};

// (ring_hello_atom, group name, rank expected, sender's rank, sender's endpoint, sender's data link port) ->
// (group name, rank, data link port): a lower rank introduces itself to a higher one (Note [one connection per
// pair]).
using ring_hello_atom = caf::atom_constant<caf::atom("ringhello")>;
// (ring_watch_atom, peer, "rank 1 at host:port"): the endpoint monitors a peer and names it when it goes.
using ring_watch_atom = caf::atom_constant<caf::atom("ringwatch")>;

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, ring_abort& x) {
  return f(caf::meta::type_name("ring_abort"), x.from, x.reason);
}

}  // namespace ap

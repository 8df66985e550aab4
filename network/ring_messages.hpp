// The messages of a collective group across processes (collective/ring_group.hpp): a chunk of a tensor
// passed around the ring, a rank giving up, and the greeting that checks a peer is the rank it should be.
#pragma once

#include <cstdint>
#include <string>

#include <caf/all.hpp>

#include "network/wire_format.hpp"
#include "tensor/tensor.hpp"

namespace ap {

// Chunk `chunk` of what rank `from` sends at step `step` of the group's collective number `collective`.
struct ring_chunk {
  std::uint64_t collective = 0;
  std::uint8_t kind = 0;  // which collective the sender runs (ring_group.cpp's ring_kind): a mismatch is named
  std::uint32_t step = 0;
  std::uint32_t chunk = 0;
  std::int32_t from = 0;
  tensor data;
};

// Rank `from` aborted the group: every unfinished collective fails, naming it and `reason`.
struct ring_abort {
  std::int32_t from = 0;
  std::string reason;
};

// (ring_hello_atom, group name, rank expected, sender's rank, sender's endpoint) -> (group name, rank): a
// lower rank introduces itself to a higher one, which answers who it is (Note [one connection per pair]).
using ring_hello_atom = caf::atom_constant<caf::atom("ringhello")>;
// (ring_watch_atom, peer, "rank 1 at host:port"): the endpoint monitors a peer and names it when it goes.
using ring_watch_atom = caf::atom_constant<caf::atom("ringwatch")>;

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, ring_chunk& x) {
  if constexpr (is_wire_inspector<Inspector>::value) {
    return caf::error::eval([&] { return f(caf::meta::type_name("ring_chunk"), x.collective, x.kind, x.step, x.chunk, x.from); },
                            [&] { return wire_tensor(f, x.data); });
  } else {
    return f(caf::meta::type_name("ring_chunk"), x.collective, x.kind, x.step, x.chunk, x.from, shape_string(x.data));
  }
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, ring_abort& x) {
  return f(caf::meta::type_name("ring_abort"), x.from, x.reason);
}

}  // namespace ap

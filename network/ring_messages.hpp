// The messages of a collective group across processes (collective/ring_group.hpp): a chunk of a tensor
// passed around the ring, a rank giving up, and the greeting that checks a peer is the rank it should be.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <caf/all.hpp>

#include "network/wire_format.hpp"
#include "tensor/tensor.hpp"

namespace ap {

// Note [ring chunk floats]: a chunk's floats cross with no copy of our own on either side. The sender's
// chunk borrows them from the collective's buffer: CAF serialises them straight into the connection's
// write buffer, and `hold` (a token of the collective, ring_group.cpp) keeps the collective from finishing,
// so the caller from touching the buffer, while a message still borrows it. The receiver's chunk is
// deserialised into a buffer from a pool (no allocation, no page faults per chunk), returned to it when
// the chunk's last holder lets go; the ring reduces or copies straight from it. (Before: a copy into a
// fresh tensor to send, a fresh tensor per chunk received: ~8% of the time in page faults, perf.)
struct ring_floats {
  const float* data = nullptr;
  std::size_t size = 0;
  std::shared_ptr<const void> hold;  // what keeps `data` alive and unchanged
};

// Buffers of received chunks, kept for the next ones (a few; no larger than a big chunk).
class ring_buffer_pool {
 public:
  static ring_buffer_pool& instance() {
    static ring_buffer_pool* pool = new ring_buffer_pool;  // never destroyed: a chunk may outlive main's locals
    return *pool;
  }
  // A buffer of at least n floats (its first n are the chunk's), returned to the pool when let go.
  std::shared_ptr<std::vector<float>> take(std::size_t n) {
    std::unique_ptr<std::vector<float>> v;
    {
      std::lock_guard lock(mutex_);
      if (!free_.empty()) {
        v = std::move(free_.back());
        free_.pop_back();
      }
    }
    if (!v) v = std::make_unique<std::vector<float>>();
    if (v->size() < n) v->resize(n);
    return std::shared_ptr<std::vector<float>>(v.release(), [this](std::vector<float>* b) { give_back(b); });
  }

 private:
  void give_back(std::vector<float>* b) {
    std::unique_ptr<std::vector<float>> owned(b);
    if (owned->size() > max_floats_) return;
    std::lock_guard lock(mutex_);
    if (free_.size() < max_buffers_) free_.push_back(std::move(owned));
  }
  static constexpr std::size_t max_buffers_ = 32;
  static constexpr std::size_t max_floats_ = std::size_t{16} << 20;  // 64 MB
  std::mutex mutex_;
  std::vector<std::unique_ptr<std::vector<float>>> free_;
};

// Chunk `chunk` of what rank `from` sends at step `step` of the group's collective number `collective`.
struct ring_chunk {
  std::uint64_t collective = 0;
  std::uint8_t kind = 0;  // which collective the sender runs (ring_group.cpp's ring_kind): a mismatch is named
  std::uint32_t step = 0;
  std::uint32_t chunk = 0;
  std::int32_t from = 0;
  ring_floats data;  // Note [ring chunk floats]
};

// The floats as one raw block (little-endian, as wire_tensor's), after their count.
inline caf::error wire_floats(caf::serializer& sink, ring_floats& x) {
  std::uint64_t n = x.size;
  return caf::error::eval([&] { return sink(n); },
                          [&] { return n > 0 ? sink.apply_raw(n * sizeof(float), const_cast<float*>(x.data)) : caf::none; });
}
inline caf::error wire_floats(caf::deserializer& source, ring_floats& x) {
  std::uint64_t n = 0;
  if (auto err = source(n)) return err;
  if (n > (std::uint64_t{1} << 40)) return caf::make_error(caf::sec::invalid_argument, "ring chunk of " + std::to_string(n) + " floats");
  auto buffer = ring_buffer_pool::instance().take(static_cast<std::size_t>(n));
  x.data = buffer->data();
  x.size = static_cast<std::size_t>(n);
  x.hold = buffer;
  return n > 0 ? source.apply_raw(n * sizeof(float), buffer->data()) : caf::none;
}

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
                            [&] { return wire_floats(f, x.data); });
  } else {
    return f(caf::meta::type_name("ring_chunk"), x.collective, x.kind, x.step, x.chunk, x.from, x.data.size);
  }
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, ring_abort& x) {
  return f(caf::meta::type_name("ring_abort"), x.from, x.reason);
}

}  // namespace ap

// The process's oneDNN engine and the calling thread's stream (Note [primitive cache per thread]). Only for the
// tensor library's *_onednn.cpp files: it includes <dnnl.hpp>.
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

namespace ap::onednn {

// Note [bounded primitive caches]: the per-thread primitive caches are keyed by shape, and training on several
// sequence lengths (Note [sequence lengths]) meets many shapes. A cache holding this many primitives is emptied
// before it takes the next: recreating a few is cheap, an unbounded map grows with every shape ever seen.
inline constexpr std::size_t max_cached_primitives = 256;
template <class Map>
void make_room(Map& cache) {
  if (cache.size() >= max_cached_primitives) cache.clear();
}

inline dnnl::engine& engine() {
  static dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  return eng;
}

inline dnnl::stream& stream() {
  thread_local dnnl::stream s(engine());
  return s;
}

}  // namespace ap::onednn

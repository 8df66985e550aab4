// The process's oneDNN engine and the calling thread's stream (Note [primitive cache per thread] in
// matmul_onednn.cpp). Only for the tensor library's *_onednn.cpp files: it includes <dnnl.hpp>.
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

#include "tensor/bfloat16.hpp"
#include "tensor/scratch.hpp"

namespace ap::onednn {

// Note [bounded primitive caches]: the per-thread primitive caches (Note [primitive cache per thread] in
// matmul_onednn.cpp) are keyed by shape, and a language model trained on several sequence lengths (Note
// [sequence lengths] in training/trainer.hpp) meets shapes per length and microbatch size. A cache holding this
// many primitives is emptied before it takes the next: recreating a few costs milliseconds once, an unbounded
// map grows with every shape ever seen.
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

// Note [bf16 without AVX-512] (matmul_onednn.cpp): a bf16 product's operands widened to fp32 (exact), in
// buffers of the calling thread kept for its next product (Note [scratch buffers] in scratch.hpp).
struct widened_operands {
  const float* a;
  const float* b;
};
inline widened_operands widen(const bfloat16* a, std::size_t a_count, const bfloat16* b, std::size_t b_count) {
  thread_local scratch_buffer<float> wide_a, wide_b;
  float* pa = wide_a.get(a_count);
  float* pb = wide_b.get(b_count);
  to_float(a, pa, a_count);
  to_float(b, pb, b_count);
  return {pa, pb};
}

}  // namespace ap::onednn

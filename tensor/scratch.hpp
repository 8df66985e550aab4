// A thread's buffer for temporaries it makes again and again.
#pragma once

#include <cstddef>
#include <memory>
#include <new>

#include "tensor/bfloat16.hpp"

namespace ap {

// Note [scratch buffers]: grown when too small, never shrunk and never zero-filled (vector::resize would zero
// megabytes at every larger call). 64-byte aligned, as a tensor's block.
template <class T>
class scratch_buffer {
 public:
  // At least n elements, uninitialised; the pointer is valid until the next call with a larger n.
  T* get(std::size_t n) {
    if (n > capacity_) {
      data_.reset(static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t{64})));
      capacity_ = n;
    }
    return data_.get();
  }

 private:
  struct release {
    void operator()(T* p) const { ::operator delete(p, std::align_val_t{64}); }
  };
  std::unique_ptr<T, release> data_;
  std::size_t capacity_ = 0;
};

// n bf16 values widened (exactly) into `buffer`: its first n floats.
inline const float* widen_into(scratch_buffer<float>& buffer, const bfloat16* x, std::size_t n) {
  float* out = buffer.get(n);
  to_float(x, out, n);
  return out;
}

// A bf16 product's operands widened to fp32 (Note [bf16 without AVX-512]), in two buffers of the calling thread
// kept for its next product.
struct widened_operands {
  const float* a;
  const float* b;
};
inline widened_operands widen_operands(const bfloat16* a, std::size_t a_count, const bfloat16* b, std::size_t b_count) {
  thread_local scratch_buffer<float> wide_a, wide_b;
  return {widen_into(wide_a, a, a_count), widen_into(wide_b, b, b_count)};
}

}  // namespace ap

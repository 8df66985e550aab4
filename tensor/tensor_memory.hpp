// What this process's tensors hold: the heap bytes of every live tensor block, now and at their peak.
#pragma once

#include <cstdint>

namespace ap {

// Note [tensor bytes]: every tensor block is counted as the heap holds it (malloc_usable_size), added when
// allocated and taken away when freed, into one process-wide figure (relaxed atomics). The peak since the last
// reset_tensor_bytes_peak() measures the memory model's workspace (Note [memory model]).
std::uint64_t tensor_bytes_in_use();
std::uint64_t tensor_bytes_peak();
// Makes the peak the bytes in use now.
void reset_tensor_bytes_peak();

// Called by tensor's allocation and its block's deleter only.
void count_tensor_bytes_allocated(std::uint64_t bytes);
void count_tensor_bytes_freed(std::uint64_t bytes);

}  // namespace ap

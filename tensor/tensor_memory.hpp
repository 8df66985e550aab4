// What this process's tensors hold: the heap bytes of every live tensor block, now and at their peak.
#pragma once

#include <cstdint>

namespace ap {

// Note [tensor bytes]: every tensor block is counted as the heap holds it (malloc_usable_size: the block with
// its alignment margin), added when allocated and taken away when freed, by every thread into one process-wide
// figure (relaxed atomics: a few hundred blocks a step). The peak is what the memory model's workspace term is
// measured with (Note [memory model] in plan/memory_model.hpp): the most the tensors held at once since the
// last reset_tensor_bytes_peak(), whatever else the process allocates.
std::uint64_t tensor_bytes_in_use();
std::uint64_t tensor_bytes_peak();
// Makes the peak the bytes in use now.
void reset_tensor_bytes_peak();

// Called by tensor's allocation and its block's deleter only.
void count_tensor_bytes_allocated(std::uint64_t bytes);
void count_tensor_bytes_freed(std::uint64_t bytes);

}  // namespace ap

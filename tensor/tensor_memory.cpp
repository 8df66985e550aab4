#include "tensor/tensor_memory.hpp"

#include <atomic>

namespace ap {

namespace {

std::atomic<std::uint64_t> in_use{0}, peak{0};

}  // namespace

std::uint64_t tensor_bytes_in_use() { return in_use.load(std::memory_order_relaxed); }

std::uint64_t tensor_bytes_peak() { return peak.load(std::memory_order_relaxed); }

void reset_tensor_bytes_peak() { peak.store(in_use.load(std::memory_order_relaxed), std::memory_order_relaxed); }

void count_tensor_bytes_allocated(std::uint64_t bytes) {
  const std::uint64_t now = in_use.fetch_add(bytes, std::memory_order_relaxed) + bytes;
  std::uint64_t seen = peak.load(std::memory_order_relaxed);
  while (now > seen && !peak.compare_exchange_weak(seen, now, std::memory_order_relaxed)) {
  }
}

void count_tensor_bytes_freed(std::uint64_t bytes) { in_use.fetch_sub(bytes, std::memory_order_relaxed); }

}  // namespace ap

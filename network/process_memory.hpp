// Reading another process's memory on this machine with process_vm_readv (Note [one copy on one machine]).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace ap {

using memory_token = std::array<unsigned char, 16>;

// A random token a reader gives the process it will read, to check beside each copy.
memory_token fresh_memory_token();

// Where the bytes are in the process that offers them, and where that process keeps the reader's token.
struct process_region {
  std::uint64_t pid = 0;
  std::uint64_t token_at = 0;
  std::uint64_t at = 0;  // the address of the bytes
};

// Copies `bytes` of `from` into `to`, checking in the same call that the process holds `token` where it said, so
// no other process can pass for the sender. Empty when done, else why not. 16 MB or more: two halves, two threads.
std::string copy_from_process(const process_region& from, const memory_token& token, void* to, std::size_t bytes);

}  // namespace ap

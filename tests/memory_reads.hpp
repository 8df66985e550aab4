// Whether this machine lets a process read another's memory (process_vm_readv, network/process_memory.hpp): a
// container's seccomp filter may refuse it, even a process's own. Where it refuses, what would be copied out of
// a sender's memory travels on the link instead (Note [one copy on one machine], Note [one copy in the ring]),
// and the tests check that.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <string>

#include <doctest/doctest.h>

#include "network/process_memory.hpp"

namespace ap::test {

inline bool memory_reads_allowed() {
  static const bool allowed = [] {
    const memory_token token = fresh_memory_token();
    const int probe = 42;
    int got = 0;
    const std::string why = copy_from_process({static_cast<std::uint64_t>(::getpid()), reinterpret_cast<std::uintptr_t>(token.data()),
                                                reinterpret_cast<std::uintptr_t>(&probe)},
                                               token, &got, sizeof got);
    if (!why.empty()) MESSAGE("this machine refuses process_vm_readv (" << why << "): the tests check the way without it");
    return why.empty() && got == probe;
  }();
  return allowed;
}

}  // namespace ap::test

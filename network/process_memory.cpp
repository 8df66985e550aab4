#include "network/process_memory.hpp"

#include <sys/uio.h>

#include <cerrno>
#include <cstring>
#include <random>
#include <thread>

namespace ap {
namespace {

// From this size on a copy runs in two halves on two threads, which copy large tensors faster than one.
constexpr std::size_t split_bytes = std::size_t{16} << 20;

// copy_from_process on the calling thread.
std::string copy_whole(const process_region& from, const memory_token& token, void* to, std::size_t bytes) {
  memory_token seen{};
  auto* into = static_cast<unsigned char*>(to);
  std::size_t done = 0;
  bool token_read = false;
  while (!token_read || done < bytes) {  // the kernel may stop early at an element's boundary
    iovec local[2], remote[2];
    int count = 0;
    if (!token_read) {
      local[count] = {seen.data(), seen.size()};
      remote[count++] = {reinterpret_cast<void*>(static_cast<std::uintptr_t>(from.token_at)), seen.size()};
    }
    if (done < bytes) {
      local[count] = {into + done, bytes - done};
      remote[count++] = {reinterpret_cast<void*>(static_cast<std::uintptr_t>(from.at + done)), bytes - done};
    }
    const ssize_t n = ::process_vm_readv(static_cast<pid_t>(from.pid), local, static_cast<unsigned long>(count), remote,
                                         static_cast<unsigned long>(count), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return "cannot read process " + std::to_string(from.pid) + "'s memory: " + std::strerror(errno);
    if (n == 0) return "process " + std::to_string(from.pid) + " gave no bytes";
    std::size_t got = static_cast<std::size_t>(n);
    if (!token_read) {
      if (got < seen.size()) return "process " + std::to_string(from.pid) + " gave part of its token";
      token_read = true;
      got -= seen.size();
      if (seen != token) return "process " + std::to_string(from.pid) + " does not hold the token given to the sender: another process";
    }
    done += got;
  }
  return "";
}

}  // namespace

memory_token fresh_memory_token() {
  std::random_device random;
  memory_token t{};
  for (std::size_t i = 0; i < t.size(); i += 4) {
    const unsigned int r = random();
    std::memcpy(t.data() + i, &r, 4);
  }
  return t;
}

std::string copy_from_process(const process_region& from, const memory_token& token, void* to, std::size_t bytes) {
  if (bytes < split_bytes) return copy_whole(from, token, to, bytes);
  // Each half checks the token; the sender only waits meanwhile, so its core or another is free.
  const std::size_t first = bytes / 2 / 64 * 64;
  process_region second = from;
  second.at += first;
  std::string second_error;
  std::thread helper([&] { second_error = copy_whole(second, token, static_cast<unsigned char*>(to) + first, bytes - first); });
  const std::string first_error = copy_whole(from, token, to, first);
  helper.join();
  return first_error.empty() ? second_error : first_error;
}

}  // namespace ap

#include "network/link_echo.hpp"

#include <unistd.h>

#include <thread>
#include <vector>

namespace ap {
namespace {

constexpr std::uint64_t offered = std::uint64_t{1} << 63;  // in a frame's size: its bytes are in the peer

}  // namespace

std::uint16_t start_link_echo(const std::string& host, std::shared_ptr<tls_context> tls, std::chrono::milliseconds timeout) {
  auto listener = std::make_shared<link_listener>(host, std::move(tls));
  const std::uint16_t port = listener->port();
  std::thread([listener, timeout] {
    try {
      std::vector<std::string> dropped;
      const auto link = listener->accept(link_echo_hello, std::chrono::steady_clock::now() + timeout, dropped);
      const memory_token token = fresh_memory_token();
      link->write(token.data(), token.size(), timeout, nullptr);
      const bool one_machine = link->same_host();
      std::vector<char> frame;
      for (;;) {
        std::uint64_t size = 0;
        link->read(&size, sizeof size, timeout, nullptr);
        const std::uint64_t bytes = size & ~offered;
        if (bytes == 0 || bytes > link_echo_max_bytes) return;
        frame.resize(static_cast<std::size_t>(bytes));
        if (size & offered) {
          process_region region;
          link->read(&region, sizeof region, timeout, nullptr);
          const std::uint8_t answer = one_machine && copy_from_process(region, token, frame.data(), frame.size()).empty() ? 1 : 0;
          link->write(&answer, sizeof answer, timeout, nullptr);
          continue;
        }
        link->read(frame.data(), frame.size(), timeout, nullptr);
        link->write(&size, sizeof size, timeout, nullptr);
        link->write(frame.data(), frame.size(), timeout, nullptr);
      }
    } catch (const link_error&) {
      // The peer hung up, or never came: the echo ends either way.
    }
  }).detach();
  return port;
}

void link_echo_round_trip(data_link& link, const std::vector<char>& frame, std::vector<char>& back,
                          std::chrono::milliseconds timeout) {
  const std::uint64_t bytes = frame.size();
  link.write(&bytes, sizeof bytes, timeout, nullptr);
  link.write(frame.data(), frame.size(), timeout, nullptr);
  std::uint64_t size = 0;
  link.read(&size, sizeof size, timeout, nullptr);
  if (size != bytes) throw link_error(link_error::kind::failed, "the echo sent back " + std::to_string(size) + " bytes for " + std::to_string(bytes));
  back.resize(frame.size());
  link.read(back.data(), back.size(), timeout, nullptr);
}

bool link_echo_copy(data_link& link, const memory_token& token, const std::vector<char>& frame,
                    std::chrono::milliseconds timeout) {
  struct {
    std::uint64_t size;
    process_region region;
  } offer{frame.size() | offered, {static_cast<std::uint64_t>(::getpid()), reinterpret_cast<std::uintptr_t>(token.data()),
                                   reinterpret_cast<std::uintptr_t>(frame.data())}};
  static_assert(sizeof offer == 32, "an offer's bytes on the wire: size, then the region");
  link.write(&offer, sizeof offer, timeout, nullptr);
  std::uint8_t answer = 9;
  link.read(&answer, sizeof answer, timeout, nullptr);
  if (answer > 1) throw link_error(link_error::kind::failed, "the echo answered " + std::to_string(answer) + " to a frame offered");
  return answer == 1;
}

}  // namespace ap

#include "network/link_echo.hpp"

#include <thread>
#include <vector>

namespace ap {

std::uint16_t start_link_echo(const std::string& host, std::shared_ptr<tls_context> tls, std::chrono::milliseconds timeout) {
  auto listener = std::make_shared<link_listener>(host, std::move(tls));
  const std::uint16_t port = listener->port();
  std::thread([listener, timeout] {
    try {
      std::vector<std::string> dropped;
      const auto link = listener->accept(link_echo_hello, std::chrono::steady_clock::now() + timeout, dropped);
      std::vector<char> frame;
      for (;;) {
        std::uint64_t size = 0;
        link->read(&size, sizeof size, timeout, nullptr);
        if (size == 0 || size > link_echo_max_bytes) return;
        frame.resize(static_cast<std::size_t>(size));
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

}  // namespace ap

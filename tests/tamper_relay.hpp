// A TCP relay for tests of what crosses the wire: it listens on `listen_host` and forwards every connection to
// 127.0.0.1:`target_port`, both ways. On the first connection it keeps what the client sent and flips one bit
// of the client's byte number `flip_at` (none when npos), or, once flip_next() was called, of the next
// client-to-server chunk that passes.
#pragma once

#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

namespace ap::test {

class tamper_relay {
 public:
  using bytes = std::vector<unsigned char>;

  tamper_relay(const std::string& listen_host, std::uint16_t target_port, std::size_t flip_at = std::string::npos)
      : target_port_(target_port), flip_at_(flip_at) {
    listener_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    REQUIRE(::inet_pton(AF_INET, listen_host.c_str(), &a.sin_addr) == 1);
    socklen_t len = sizeof a;
    REQUIRE(::bind(listener_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    REQUIRE(::listen(listener_, 16) == 0);
    REQUIRE(::getsockname(listener_, reinterpret_cast<sockaddr*>(&a), &len) == 0);
    port_ = ntohs(a.sin_port);
    acceptor_ = std::thread([this] { accept_loop(); });
  }
  ~tamper_relay() {
    stop();
    ::close(listener_);
  }
  tamper_relay(const tamper_relay&) = delete;
  tamper_relay& operator=(const tamper_relay&) = delete;

  std::uint16_t port() const { return port_; }
  void flip_next() { flip_now_ = true; }
  bool flipped() const { return flipped_; }
  // What the first connection's client sent; ends the relay (call once the link is gone).
  const bytes& from_client() {
    stop();
    return from_client_;
  }

 private:
  void stop() {
    stop_ = true;
    if (acceptor_.joinable()) acceptor_.join();
    for (auto& t : pipes_)
      if (t.joinable()) t.join();
  }

  void accept_loop() {
    int connection = 0;
    while (!stop_) {
      pollfd p{listener_, POLLIN, 0};
      if (::poll(&p, 1, 20) <= 0) continue;
      const int client = ::accept(listener_, nullptr, nullptr);
      if (client < 0) continue;
      const int server = ::socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      a.sin_port = htons(target_port_);
      if (::connect(server, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
        ::close(client);
        ::close(server);
        continue;
      }
      const bool first = connection++ == 0;
      pipes_.emplace_back([this, client, server, first] { forward(client, server, first); });
    }
  }

  void forward(int client, int server, bool first) {
    bytes buf(64 << 10);
    pollfd fds[2] = {{client, POLLIN, 0}, {server, POLLIN, 0}};
    bool ended = false;
    while (!stop_ && !ended) {
      if (::poll(fds, 2, 20) <= 0) continue;
      for (int i = 0; i < 2 && !ended; ++i) {
        if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        const ssize_t n = ::recv(fds[i].fd, buf.data(), buf.size(), 0);
        if (n <= 0) {
          ended = true;
          break;
        }
        if (i == 0 && first) {
          const std::size_t before = from_client_.size();
          from_client_.insert(from_client_.end(), buf.begin(), buf.begin() + n);
          if (!flipped_ && flip_now_) {
            buf[0] ^= 0x10;
            flipped_ = true;
          } else if (!flipped_ && flip_at_ >= before && flip_at_ < before + static_cast<std::size_t>(n)) {
            buf[flip_at_ - before] ^= 0x10;
            flipped_ = true;
          }
        }
        const int to = i == 0 ? server : client;
        for (ssize_t sent = 0; sent < n;) {
          const ssize_t w = ::send(to, buf.data() + sent, static_cast<std::size_t>(n - sent), MSG_NOSIGNAL);
          if (w <= 0) {
            ended = true;
            break;
          }
          sent += w;
        }
      }
    }
    ::close(client);
    ::close(server);
  }

  std::uint16_t target_port_;
  std::size_t flip_at_;
  int listener_ = -1;
  std::uint16_t port_ = 0;
  std::atomic<bool> stop_{false}, flip_now_{false}, flipped_{false};
  bytes from_client_;  // the first connection's thread writes it; read after stop() joined that thread
  std::thread acceptor_;
  std::vector<std::thread> pipes_;  // only the acceptor adds to it; joined after the acceptor
};

}  // namespace ap::test

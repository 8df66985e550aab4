// bench_tcp_loopback: the ceiling of this machine's loopback TCP between two processes, with nothing of ours in
// the way: a forked child receives N MB messages into one buffer while the parent sends them from another,
// plain send()/recv() on one connection. What bench_network (activations between stages) and bench_allreduce can
// at best approach here. Prints GB/s per size (1e9 bytes per second), then one JSON line.
//
// Usage: bench_tcp_loopback [--total-mb T (default 1024: each size sends T MB in all)]
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench_support.hpp"

namespace {

// Sends `count` messages of `bytes` to a child that receives them all; seconds from the first send to the
// child's one-byte answer after the last.
double transfer(std::size_t bytes, int count) {
  const int listener = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t size = sizeof address;
  if (listener < 0 || bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
      listen(listener, 1) != 0 || getsockname(listener, reinterpret_cast<sockaddr*>(&address), &size) != 0)
    throw std::runtime_error(std::string("cannot listen on loopback: ") + std::strerror(errno));
  const pid_t child = fork();
  if (child < 0) throw std::runtime_error("fork failed");
  if (child == 0) {
    const int c = accept(listener, nullptr, nullptr);
    std::vector<char> in(bytes, 0);
    for (int m = 0; m < count; ++m)
      for (std::size_t got = 0; got < bytes;) {
        const ssize_t k = recv(c, in.data() + got, bytes - got, 0);
        if (k <= 0) _exit(1);
        got += static_cast<std::size_t>(k);
      }
    const char done = 'x';
    _exit(send(c, &done, 1, 0) == 1 ? 0 : 1);
  }
  close(listener);
  const int c = socket(AF_INET, SOCK_STREAM, 0);
  if (c < 0 || connect(c, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0)
    throw std::runtime_error(std::string("cannot connect on loopback: ") + std::strerror(errno));
  std::vector<char> out(bytes, 1);
  const auto t0 = std::chrono::steady_clock::now();
  for (int m = 0; m < count; ++m)
    for (std::size_t sent = 0; sent < bytes;) {
      const ssize_t k = send(c, out.data() + sent, bytes - sent, 0);
      if (k <= 0) throw std::runtime_error("send failed");
      sent += static_cast<std::size_t>(k);
    }
  char done = 0;
  if (recv(c, &done, 1, 0) != 1) throw std::runtime_error("the receiver did not answer");
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  close(c);
  int status = 0;
  waitpid(child, &status, 0);
  return seconds;
}

}  // namespace

int main(int argc, char** argv) try {
  std::size_t total_mb = 1024;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--total-mb" && i + 1 < argc) total_mb = std::stoul(argv[++i]);
    else throw std::invalid_argument("usage: bench_tcp_loopback [--total-mb T]");
  }
  std::printf("loopback TCP between two processes (plain send/recv), load %s\n     MB   GB/s\n",
              ap::bench::load_average().c_str());
  nlohmann::json sizes = nlohmann::json::array();
  for (std::size_t mb : {1, 4, 16, 64}) {
    const std::size_t bytes = mb << 20;
    const int count = static_cast<int>(std::max<std::size_t>(4, total_mb / mb));
    const double gb_s = static_cast<double>(bytes) * count / transfer(bytes, count) / 1e9;
    std::printf("%7zu %6.2f\n", mb, gb_s);
    sizes.push_back({{"mb", mb}, {"gb_s", gb_s}});
  }
  std::printf("%s\n", nlohmann::json{{"bench", "tcp_loopback"}, {"sizes", sizes}}.dump().c_str());
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_tcp_loopback: %s\n", e.what());
  return 1;
}

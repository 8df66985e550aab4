#include "network/port_probe.hpp"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

namespace ap {

port_state probe_port(const std::string& host, int port, std::chrono::milliseconds limit) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0 || !found) return port_state::unknown;
  port_state state = port_state::unknown;
  const int fd = ::socket(found->ai_family, found->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, found->ai_protocol);
  if (fd >= 0) {
    int rc = ::connect(fd, found->ai_addr, found->ai_addrlen);
    if (rc == 0) {
      state = port_state::listening;
    } else if (errno == ECONNREFUSED) {
      state = port_state::refused;
    } else if (errno == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      if (::poll(&p, 1, static_cast<int>(limit.count())) == 1) {
        int error = 0;
        socklen_t size = sizeof error;
        ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &size);
        state = error == 0 ? port_state::listening : error == ECONNREFUSED ? port_state::refused : port_state::unknown;
      }
    }
    ::close(fd);
  }
  freeaddrinfo(found);
  return state;
}

std::string lost_connection_text(port_state port, const std::string& reason) {
  const std::string lost = "lost the connection: " + reason;
  switch (port) {
    case port_state::listening:
      return " stopped answering heartbeats (" + lost +
             "; its port still accepts connections: the process is alive but stopped, frozen or overloaded)";
    case port_state::refused:
      return " is gone (" + lost + "; nothing listens on its port: the process died or was killed)";
    case port_state::unknown:
      break;
  }
  return " is gone (" + lost + ")";
}

}  // namespace ap

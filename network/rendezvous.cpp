#include "network/rendezvous.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <algorithm>
#include <cstring>
#include <memory>
#include <regex>
#include <stdexcept>
#include <thread>

#include "network/whole_number.hpp"

namespace ap {
namespace {

using clock_type = std::chrono::steady_clock;

constexpr const char* greeting = "actorpipe-rendezvous 1";

// A node's registration line: "actorpipe-rendezvous 1 rank R at HOST:PORT" (rank, host, port captured).
const std::regex& registration_format() {
  static const std::regex format(std::string(greeting) + " (?:rank ([0-9]{1,9})|join) at (\\S+):([0-9]{1,5})");
  return format;
}

// poll()'s timeout until `deadline`: -1 (none) for time_point::max().
int milliseconds_left(clock_type::time_point deadline) {
  if (deadline == clock_type::time_point::max()) return -1;
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock_type::now()).count();
  return left > 0 ? static_cast<int>(std::min<long long>(left, 1 << 30)) : 0;
}

// One line ("...\n", without it) from `fd` before `deadline`; empty when the peer closed first or time ran out.
std::string read_line(int fd, clock_type::time_point deadline, bool* timed_out = nullptr) {
  std::string line;
  char c = 0;
  while (line.size() < 512) {
    pollfd p{fd, POLLIN, 0};
    const int ready = poll(&p, 1, milliseconds_left(deadline));
    if (ready == 0) {
      if (timed_out) *timed_out = true;
      return "";
    }
    if (ready < 0) {
      if (errno == EINTR) continue;
      return "";
    }
    const ssize_t n = recv(fd, &c, 1, 0);
    if (n <= 0) return "";
    if (c == '\n') return line;
    line += c;
  }
  return line;
}

bool send_all(int fd, const std::string& text) {
  std::size_t sent = 0;
  while (sent < text.size()) {
    const ssize_t n = send(fd, text.data() + sent, text.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    sent += static_cast<std::size_t>(n);
  }
  return true;
}

// Keepalive (10 s idle, every 5 s, 3 unanswered), so a wait for the job's end does not outlive a silent peer.
void keep_alive(int fd) {
  const int one = 1, idle = 10, interval = 5, count = 3;
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof interval);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof count);
}

std::string endpoint_text(const rendezvous_env& e) { return e.master_host + ":" + std::to_string(e.master_port); }

}  // namespace

std::string wait_text(std::chrono::milliseconds wait) {
  const long long ms = wait.count();
  if (ms < 1000) return std::to_string(ms) + " ms";
  if (ms % 1000 == 0) return std::to_string(ms / 1000) + " s";
  char text[32];
  std::snprintf(text, sizeof text, "%.1f s", static_cast<double>(ms) / 1000.0);
  return text;
}

rendezvous_env rendezvous_from_env(const std::function<const char*(const char*)>& get) {
  const auto value = [&](const char* name) -> std::string {
    const char* v = get(name);
    return v ? std::string(v) : std::string();
  };
  rendezvous_env e;
  const std::string port = value("MASTER_PORT");
  if (!value("RANK").empty() || !value("WORLD_SIZE").empty()) {
    e.source = "RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT";
    for (const char* name : {"RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"})
      if (value(name).empty())
        throw std::invalid_argument(std::string("--rendezvous env: ") + name +
                                    " is not set (torchrun's variables: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT)");
    e.world_size = parse_whole_number(value("WORLD_SIZE"), 1, 65536, "--rendezvous env: WORLD_SIZE");
    e.rank = parse_whole_number(value("RANK"), 0, e.world_size - 1, "--rendezvous env: RANK (WORLD_SIZE " + value("WORLD_SIZE") + ")");
    e.master_host = value("MASTER_ADDR");
  } else if (!value("SLURM_PROCID").empty()) {
    e.source = "SLURM_PROCID, SLURM_NTASKS, SLURM_STEP_NODELIST, MASTER_PORT";
    if (value("SLURM_NTASKS").empty()) throw std::invalid_argument("--rendezvous env: SLURM_PROCID is set but SLURM_NTASKS is not");
    e.world_size = parse_whole_number(value("SLURM_NTASKS"), 1, 65536, "--rendezvous env: SLURM_NTASKS");
    e.rank = parse_whole_number(value("SLURM_PROCID"), 0, e.world_size - 1,
                      "--rendezvous env: SLURM_PROCID (SLURM_NTASKS " + value("SLURM_NTASKS") + ")");
    std::string list = value("SLURM_STEP_NODELIST");
    if (list.empty()) list = value("SLURM_JOB_NODELIST");
    if (list.empty())
      throw std::invalid_argument("--rendezvous env: neither SLURM_STEP_NODELIST nor SLURM_JOB_NODELIST is set");
    e.master_host = value("MASTER_ADDR").empty() ? expand_slurm_hostlist(list).at(0) : value("MASTER_ADDR");
  } else {
    throw std::invalid_argument(
        "--rendezvous env: neither torchrun's variables (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) nor Slurm's "
        "(SLURM_PROCID, SLURM_NTASKS, SLURM_STEP_NODELIST) are set");
  }
  if (!port.empty()) e.master_port = parse_whole_number(port, 1, 65535, "--rendezvous env: MASTER_PORT");
  return e;
}

std::vector<std::string> expand_slurm_hostlist(const std::string& list) {
  const auto bad = [&](const std::string& why) {
    return std::invalid_argument("Slurm host list '" + list + "': " + why);
  };
  std::vector<std::string> hosts;
  std::size_t i = 0;
  while (i < list.size()) {
    // One item: prefix[ranges]suffix, up to a top-level comma.
    std::string prefix;
    while (i < list.size() && list[i] != ',' && list[i] != '[') prefix += list[i++];
    if (i < list.size() && list[i] == '[') {
      const std::size_t close = list.find(']', i);
      if (close == std::string::npos) throw bad("a '[' is not closed");
      const std::string ranges = list.substr(i + 1, close - i - 1);
      i = close + 1;
      std::string suffix;
      while (i < list.size() && list[i] != ',') suffix += list[i++];
      if (suffix.find('[') != std::string::npos) throw bad("only one bracketed range per name is read");
      std::size_t at = 0;
      while (at <= ranges.size()) {
        const std::size_t comma = std::min(ranges.find(',', at), ranges.size());
        const std::string piece = ranges.substr(at, comma - at);
        const std::size_t dash = piece.find('-');
        const std::string first = piece.substr(0, dash);
        const std::string last = dash == std::string::npos ? first : piece.substr(dash + 1);
        const std::regex digits("[0-9]+");
        if (!std::regex_match(first, digits) || !std::regex_match(last, digits)) throw bad("'" + piece + "' is not a number or a range");
        const long from = std::stol(first), to = std::stol(last);
        if (to < from) throw bad("the range '" + piece + "' runs backwards");
        if (to - from > 65536) throw bad("the range '" + piece + "' is too long");
        for (long n = from; n <= to; ++n) {
          std::string number = std::to_string(n);
          if (number.size() < first.size()) number.insert(0, first.size() - number.size(), '0');  // zero padding
          hosts.push_back(prefix + number + suffix);
        }
        at = comma + 1;
      }
    } else if (!prefix.empty()) {
      hosts.push_back(prefix);
    }
    if (i < list.size() && list[i] == ',') ++i;
  }
  if (hosts.empty()) throw bad("no host in it");
  return hosts;
}

rendezvous_server::rendezvous_server(int port, int world_size, std::chrono::milliseconds timeout,
                                     const std::string& master_host, bool accept_joins)
    : port_(port),
      world_size_(world_size),
      timeout_(timeout),
      master_host_(master_host),
      node_fds_(static_cast<std::size_t>(world_size), -1),
      accept_joins_(accept_joins) {
  if (world_size < 2) throw std::invalid_argument("--rendezvous env: WORLD_SIZE " + std::to_string(world_size) +
                                                  " leaves no rank to be a node; run without --rendezvous");
  listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listen_fd_ < 0) throw std::runtime_error(std::string("rendezvous: socket: ") + std::strerror(errno));
  const int one = 1;
  setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_ANY);
  address.sin_port = htons(static_cast<std::uint16_t>(port));
  if (bind(listen_fd_, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 || listen(listen_fd_, 128) != 0) {
    const int error = errno;
    close(listen_fd_);
    throw std::runtime_error("rendezvous: rank 0 cannot listen on MASTER_PORT " + std::to_string(port) + ": " +
                             std::strerror(error) +
                             (error == EADDRINUSE ? " (another job on this machine? set another MASTER_PORT)" : ""));
  }
  socklen_t size = sizeof address;
  if (getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&address), &size) == 0) port_ = ntohs(address.sin_port);
}

int rendezvous_node_port(const rendezvous_env& env) {
  const int port = env.master_port + env.rank;
  return port <= 65535 ? port : 0;
}

rendezvous_server::~rendezvous_server() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  if (late_.joinable()) late_.join();
  for (int fd : node_fds_)
    if (fd >= 0) close(fd);
  for (int fd : joined_fds_) close(fd);
  if (listen_fd_ >= 0) close(listen_fd_);
}

std::vector<std::string> rendezvous_server::wait_for_nodes() {
  const auto deadline = clock_type::now() + timeout_;
  std::vector<std::string> nodes(static_cast<std::size_t>(world_size_));
  int registered = 0;
  const std::regex& line_format = registration_format();
  while (registered < world_size_ - 1) {
    pollfd p{listen_fd_, POLLIN, 0};
    const int ready = poll(&p, 1, milliseconds_left(deadline));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) {
      std::string missing;
      for (int r = 1; r < world_size_; ++r)
        if (nodes[static_cast<std::size_t>(r)].empty()) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
      const std::string at = master_host_.empty() ? "on MASTER_PORT " + std::to_string(port_)
                                                  : "at " + master_host_ + ":" + std::to_string(port_) +
                                                        " (MASTER_ADDR:MASTER_PORT)";
      throw std::runtime_error("rendezvous: rank 0 waited " + wait_text(timeout_) + " (--rendezvous-timeout) " + at +
                               " for " + std::to_string(world_size_ - 1) + (world_size_ == 2 ? " node; " : " nodes; ") +
                               std::to_string(registered) + " registered, rank" +
                               (world_size_ - 1 - registered == 1 ? " " : "s ") + missing +
                               " did not (not started, or MASTER_ADDR does not reach this machine)");
    }
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    keep_alive(fd);
    const std::string line = read_line(fd, std::min(deadline, clock_type::now() + std::chrono::seconds(5)));
    std::smatch m;
    if (!std::regex_match(line, m, line_format)) {
      close(fd);  // a port scanner, or another program: not a node of this job
      continue;
    }
    if (!m[1].matched) {
      std::lock_guard lock(mutex_);
      take_join(fd, m[2].str() + ":" + m[3].str());
      continue;
    }
    const long rank = std::stol(m[1]);
    if (rank < 1 || rank >= world_size_ || !nodes[static_cast<std::size_t>(rank)].empty()) {
      close(fd);
      throw std::runtime_error("rendezvous: a node registered as rank " + m[1].str() + " at " + m[2].str() + ":" +
                               m[3].str() + (rank >= 1 && rank < world_size_ ? ", which another node already is"
                                                                          : ", outside 1.." + std::to_string(world_size_ - 1)));
    }
    nodes[static_cast<std::size_t>(rank)] = m[2].str() + ":" + m[3].str();
    node_fds_[static_cast<std::size_t>(rank)] = fd;
    ++registered;
  }
  addresses_ = nodes;
  late_ = std::thread([this] { accept_late_registrations(); });
  return std::vector<std::string>(nodes.begin() + 1, nodes.end());
}

void rendezvous_server::accept_late_registrations() {
  const std::regex& line_format = registration_format();
  const auto say = [&](const std::string& line) {
    if (log) log(line);
  };
  for (;;) {
    {
      std::lock_guard lock(mutex_);
      if (stopping_) return;
    }
    pollfd p{listen_fd_, POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) continue;  // wakes to see stopping_
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    keep_alive(fd);
    const std::string line = read_line(fd, clock_type::now() + std::chrono::seconds(5));
    std::smatch m;
    if (!std::regex_match(line, m, line_format)) {
      close(fd);
      continue;
    }
    const std::string address = m[2].str() + ":" + m[3].str();
    std::lock_guard lock(mutex_);
    if (!m[1].matched && !stopping_) {
      take_join(fd, address);
      continue;
    }
    const long rank = m[1].matched ? std::stol(m[1]) : -1;
    if (stopping_ || rank < 1 || rank >= world_size_) {
      if (stopping_) send_all(fd, "done\n");
      close(fd);
      if (!stopping_) say("rendezvous: a node registered as rank " + m[1].str() + " at " + address + ", outside 1.." +
                          std::to_string(world_size_ - 1) + ": ignored");
      continue;
    }
    int& old = node_fds_[static_cast<std::size_t>(rank)];
    if (old >= 0) close(old);  // the process it belonged to is gone, or going
    old = fd;
    const std::string& first = addresses_[static_cast<std::size_t>(rank)];
    say("rendezvous: rank " + m[1].str() + " registered again at " + address +
        (address == first ? " (restarted: a recovery finds it there)"
                          : ", not at " + first + " where the job placed it: a recovery cannot find it there"));
  }
}

void rendezvous_server::take_join(int fd, const std::string& address) {
  if (!accept_joins_) {
    send_all(fd, "refused: rank 0's run takes no joining node (it needs --elastic MIN)\n");
    close(fd);
    if (log) log("rendezvous: refused a node joining at " + address + ": the run is not elastic");
    return;
  }
  joined_fds_.push_back(fd);
  joined_.push_back(address);
  if (log) log("rendezvous: a node joined at " + address + ": an elastic run takes it in at a checkpoint");
}

std::vector<std::string> rendezvous_server::joined() {
  std::lock_guard lock(mutex_);
  return joined_;
}

void rendezvous_server::release() {
  std::lock_guard lock(mutex_);
  stopping_ = true;
  for (int& fd : node_fds_)
    if (fd >= 0) {
      send_all(fd, "done\n");
      close(fd);
      fd = -1;
    }
  for (int fd : joined_fds_) {
    send_all(fd, "done\n");
    close(fd);
  }
  joined_fds_.clear();
}

rendezvous_client::rendezvous_client(const rendezvous_env& env, std::chrono::milliseconds timeout) : env_(env) {
  const auto deadline = clock_type::now() + timeout;
  std::string last_error = "no attempt";
  while (true) {
    addrinfo hints{};
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    const int rc = getaddrinfo(env.master_host.c_str(), std::to_string(env.master_port).c_str(), &hints, &found);
    if (rc != 0 && rc != EAI_AGAIN)  // a name nobody knows is not retried (Note [rendezvous fails fast])
      throw std::runtime_error("rendezvous: " + who() + ": MASTER_ADDR '" + env.master_host +
                               "' (from " + env.source + ") does not resolve: " + gai_strerror(rc) +
                               " (rank 0's host name or IPv4 address)");
    if (rc != 0) {
      last_error = std::string("the resolver did not answer for '") + env.master_host + "' (" + gai_strerror(rc) + ")";
    } else {
      std::unique_ptr<addrinfo, decltype(&freeaddrinfo)> guard(found, freeaddrinfo);
      fd_ = socket(found->ai_family, found->ai_socktype | SOCK_CLOEXEC, found->ai_protocol);
      if (fd_ >= 0 && connect(fd_, found->ai_addr, found->ai_addrlen) == 0) break;
      last_error = std::strerror(errno);
      if (fd_ >= 0) close(fd_);
      fd_ = -1;
    }
    if (clock_type::now() >= deadline)
      throw std::runtime_error("rendezvous: " + who() + " could not reach rank 0 at " +
                               endpoint_text(env) + " (from " + env.source + ") within " + wait_text(timeout) +
                               " (--rendezvous-timeout): " + last_error);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  keep_alive(fd_);
  sockaddr_in local{};
  socklen_t size = sizeof local;
  char text[INET_ADDRSTRLEN] = {};
  if (getsockname(fd_, reinterpret_cast<sockaddr*>(&local), &size) != 0 ||
      inet_ntop(AF_INET, &local.sin_addr, text, sizeof text) == nullptr) {
    close(fd_);
    throw std::runtime_error("rendezvous: cannot read this machine's address on the connection to " + endpoint_text(env));
  }
  local_ = text;
}

rendezvous_client::~rendezvous_client() {
  if (fd_ >= 0) close(fd_);
}

std::string rendezvous_client::who() const {
  return env_.rank >= 0 ? "rank " + std::to_string(env_.rank) : std::string("the joining node");
}

void rendezvous_client::register_node(int port) {
  const std::string line = std::string(greeting) + (env_.rank >= 0 ? " rank " + std::to_string(env_.rank) : " join") +
                           " at " + local_ + ":" + std::to_string(port) + "\n";
  if (!send_all(fd_, line))
    throw std::runtime_error("rendezvous: " + who() + " lost rank 0 at " + endpoint_text(env_) + " while registering");
}

bool rendezvous_client::wait_for_release() {
  const std::string line = read_line(fd_, clock_type::time_point::max());
  if (line.rfind("refused: ", 0) == 0) refusal_ = line.substr(9);
  return line == "done";
}

void rendezvous_client::cancel() { shutdown(fd_, SHUT_RDWR); }

}  // namespace ap

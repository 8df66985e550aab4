// `actorpipe node` child processes for tests and benchmarks: started with fork/exec, their port read from
// the line they print, and always killed (SIGKILL) and reaped by the destructor, even when a check fails.
// A child also dies with the process that started it (PR_SET_PDEATHSIG), so a crashed test leaves none.
// Nodes use mutual TLS unless told --insecure: certificates made at run time by scripts/make_test_certs.sh.
#pragma once

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "network/transport_security.hpp"
#include "test_support.hpp"  // scaled(): Note [test time scale]

namespace ap::test {

class child_process {
 public:
  // Runs argv[0] with argv; its stdout comes back through a pipe, its stderr goes to a temporary file.
  explicit child_process(std::vector<std::string> argv) {
    char name[] = "/tmp/actorpipe-child-XXXXXX";
    const int err_fd = mkstemp(name);
    if (err_fd < 0) throw std::runtime_error("child_process: mkstemp failed");
    stderr_path_ = name;
    int out[2];
    if (pipe2(out, O_CLOEXEC) != 0) throw std::runtime_error("child_process: pipe failed");
    std::vector<char*> args;
    for (auto& a : argv) args.push_back(a.data());
    args.push_back(nullptr);
    const pid_t parent = getpid();
    pid_ = fork();
    if (pid_ < 0) throw std::runtime_error("child_process: fork failed");
    if (pid_ == 0) {  // only async-signal-safe calls until exec
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(111);
      dup2(out[1], STDOUT_FILENO);
      dup2(err_fd, STDERR_FILENO);
      execv(args[0], args.data());
      _exit(127);
    }
    close(out[1]);
    close(err_fd);
    out_ = out[0];
  }
  ~child_process() {
    kill9();
    if (out_ >= 0) close(out_);
    std::remove(stderr_path_.c_str());
  }
  child_process(const child_process&) = delete;
  child_process& operator=(const child_process&) = delete;

  pid_t pid() const { return pid_; }

  // The next line of its stdout, or "" when none comes within `limit` (scaled by the caller: Note [test time
  // scale]) or the child closed stdout.
  std::string read_line(scaled_limit limit) { return read_line_by(std::chrono::steady_clock::now() + limit); }

  // Every line of its stdout until it closes it (or prints an empty line), or until `limit` (scaled by the caller)
  // has passed.
  std::vector<std::string> read_lines(scaled_limit limit) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    std::vector<std::string> lines;
    for (std::string line = read_line_by(deadline); !line.empty(); line = read_line_by(deadline)) lines.push_back(line);
    return lines;
  }

  // Kills it with SIGKILL and reaps it; idempotent.
  void kill9() {
    if (reaped_) return;
    ::kill(pid_, SIGKILL);
    waitpid(pid_, &status_, 0);
    reaped_ = true;
  }

  // Its exit code once it exits within `limit` (scaled by the caller: Note [test time scale]); -1 if it is still
  // running then (it keeps running).
  int wait_exit(scaled_limit limit) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (!reaped_) {
      if (waitpid(pid_, &status_, WNOHANG) == pid_) {
        reaped_ = true;
        break;
      }
      if (std::chrono::steady_clock::now() > deadline) return -1;
      usleep(10000);
    }
    return WIFEXITED(status_) ? WEXITSTATUS(status_) : 128 + WTERMSIG(status_);
  }

  bool running() {
    if (reaped_) return false;
    if (waitpid(pid_, &status_, WNOHANG) == pid_) reaped_ = true;
    return !reaped_;
  }

  // Everything it wrote on stderr so far.
  std::string stderr_text() const {
    std::ifstream f(stderr_path_);
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
  }

 private:
  std::string read_line_by(std::chrono::steady_clock::time_point deadline) {
    for (;;) {
      if (auto nl = buffer_.find('\n'); nl != std::string::npos) {
        std::string line = buffer_.substr(0, nl);
        buffer_.erase(0, nl + 1);
        return line;
      }
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return "";
      pollfd p{out_, POLLIN, 0};
      if (poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
      char chunk[256];
      const ssize_t n = read(out_, chunk, sizeof chunk);
      if (n <= 0) return "";
      buffer_.append(chunk, static_cast<std::size_t>(n));
    }
  }

  pid_t pid_ = -1;
  int out_ = -1;
  int status_ = 0;
  bool reaped_ = false;
  std::string buffer_;
  std::string stderr_path_;
};

// A port nobody listens on now on loopback, nor on the `count` - 1 after it: a rendezvous's MASTER_PORT, whose
// ranks listen on MASTER_PORT + rank (Note [restart under a rendezvous]). Picked below the system's ephemeral
// range (ip_local_port_range, from 32768 by default): a port there is one no outgoing connection of another test
// takes between this check and its use, or while a killed rank is started again (a rendezvous test running
// beside others once failed that way).
inline int free_port(int count = 8) {
  int ephemeral = 32768;
  if (std::ifstream range("/proc/sys/net/ipv4/ip_local_port_range"); range) range >> ephemeral;
  const auto bindable = [](int port) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<std::uint16_t>(port));
    const bool ok = bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    close(fd);
    return ok;
  };
  std::random_device seed;
  std::mt19937 pick(seed());
  const int low = 10000, high = std::max(low + count + 1, ephemeral - count);
  for (int attempt = 0; attempt < 1000; ++attempt) {
    const int base = std::uniform_int_distribution<int>(low, high - 1)(pick);
    bool all = true;
    for (int p = base; p < base + count && all; ++p) all = bindable(p);
    if (all) return base;
  }
  throw std::runtime_error("free_port: no " + std::to_string(count) + " free ports in a row below " + std::to_string(high));
}

// A test cluster's CA and certificates, made once per process and cluster name by scripts/make_test_certs.sh
// in a temporary folder (removed at exit): "coordinator", "node" and "other" (a second coordinator) share
// the cluster's CA; another cluster name is another CA, whose certificates the first cluster refuses.
inline std::string certificate_dir(const std::string& cluster = "main") {
  struct dirs {
    std::map<std::string, std::string> made;
    ~dirs() {
      for (const auto& [name, dir] : made) std::system(("rm -rf '" + dir + "'").c_str());
    }
  };
  static dirs all;
  auto& dir = all.made[cluster];
  if (!dir.empty()) return dir;
  char name[] = "/tmp/actorpipe-certs-XXXXXX";
  if (!mkdtemp(name)) throw std::runtime_error("certificate_dir: mkdtemp failed");
  dir = name;
  // This source tree's script, or, where the programs run from a copy of the tree elsewhere (a benchmark on a
  // machine the build was copied to), the copy's, from its root.
  std::string script = std::string(AP_SOURCE_DIR) + "/scripts/make_test_certs.sh";
  if (access(script.c_str(), X_OK) != 0) script = "scripts/make_test_certs.sh";
  if (std::system((script + " " + dir + " coordinator node other > /dev/null").c_str()) != 0)
    throw std::runtime_error("certificate_dir: " + script + " failed");
  return dir;
}

// The TLS files of `name` ("coordinator", "node", "other") in `cluster`.
inline transport_security tls_security(const std::string& name = "coordinator", const std::string& cluster = "main") {
  const std::string dir = certificate_dir(cluster);
  transport_security s;
  s.ca_file = dir + "/ca.pem";
  s.certificate_file = dir + "/" + name + ".pem";
  s.key_file = dir + "/" + name + ".key";
  return s;
}

inline transport_security insecure_transport() {
  transport_security s;
  s.insecure = true;
  return s;
}

// The command-line flags that select `s`.
inline std::vector<std::string> transport_flags(const transport_security& s) {
  if (s.insecure) return {"--insecure"};
  return {"--tls-ca", s.ca_file, "--tls-cert", s.certificate_file, "--tls-key", s.key_file};
}

// An `actorpipe node --host 127.0.0.1 --port PORT` (0: a free one) and its address, read from the line
// "node listening on HOST:PORT". Without --insecure or --tls-* in `extra`, it runs mutual TLS with the
// "node" certificate of the main test cluster (tls_security).
class node_process {
 public:
  // Throws std::runtime_error (with the node's stderr) when no port is printed within 10 s (scaled); the child
  // is killed either way.
  explicit node_process(const std::string& actorpipe, std::vector<std::string> extra = {}, int port = 0)
      : node_process(std::vector<std::string>{actorpipe}, std::move(extra), port) {}
  // `command` starts actorpipe: its path, or a loader and the path (bench/bench_support.hpp, actorpipe_command).
  node_process(std::vector<std::string> command, std::vector<std::string> extra, int port = 0)
      : child_(arguments(std::move(command), std::move(extra), port)) {
    const std::string line = child_.read_line(scaled(std::chrono::seconds(10)));
    const std::string prefix = "node listening on ";
    if (line.rfind(prefix, 0) != 0) {
      child_.kill9();
      throw std::runtime_error("node did not start: stdout \"" + line + "\", stderr \"" + child_.stderr_text() + "\"");
    }
    address_ = line.substr(prefix.size());
    port_ = std::stoi(address_.substr(address_.rfind(':') + 1));
  }

  const std::string& address() const { return address_; }  // "127.0.0.1:PORT"
  int port() const { return port_; }
  child_process& process() { return child_; }

 private:
  static std::vector<std::string> arguments(std::vector<std::string> argv, std::vector<std::string> extra, int port) {
    argv.insert(argv.end(), {"node", "--host", "127.0.0.1", "--port", std::to_string(port)});
    argv.insert(argv.end(), extra.begin(), extra.end());
    const auto given = [&](const char* flag) { return std::find(extra.begin(), extra.end(), flag) != extra.end(); };
    if (!given("--insecure") && !given("--tls-ca"))
      for (auto& f : transport_flags(tls_security("node"))) argv.push_back(f);
    return argv;
  }

  child_process child_;
  std::string address_;
  int port_ = 0;
};

}  // namespace ap::test

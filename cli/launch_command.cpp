// `actorpipe launch --hostfile FILE [--ssh CMD] -- train ...`: a whole job from one command on one machine.
//
// Note [launch over ssh]: the hostfile ("host slots=N", as mpirun and DeepSpeed) gives the ranks in order, rank 0
// the first host's first slot. Each rank runs as `CMD HOST 'env RANK=r WORLD_SIZE=W MASTER_ADDR=<rank 0's host>
// MASTER_PORT=P PROGRAM train ... --rendezvous env'` (CMD: `ssh -o BatchMode=yes`; every word quoted), joined by
// Note [environment rendezvous] (rank 0 trains, the others are its nodes). Rank lines come back on stderr prefixed
// with host and rank; rank 0's stdout stays the launcher's. A node failing first ends the job at once, and the
// launcher exits with its status; otherwise with rank 0's. Ranks die with the launcher.
//
// Each rank's stdin is a pipe, and ACTORPIPE_LAUNCH_STDIN=1 makes a rank stop when it ends: ssh carries that end
// to the host, where killing the local client would leave the remote process running (no terminal, no hang-up).
// Each local client has its own process group, killed 2 s later if it still runs.
//
// Host names, the --ssh program and the --certs files are checked before any rank starts
// (Note [rendezvous fails fast]); with --certs DIR (Note [cluster certificates]) rank 0 presents
// DIR/coordinator.pem, a node DIR/HOST.pem. Tests use `--ssh scripts/local_ssh.sh`.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <memory>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "cli/commands.hpp"
#include "cli/checks.hpp"
#include "network/hostfile.hpp"

namespace ap::cli {
namespace {

struct launch_options {
  std::string hostfile;
  std::string ssh = "ssh -o BatchMode=yes";
  int master_port = 29500;
  std::string program;  // empty: this binary
  std::string certs;  // `actorpipe certs` folder
  std::vector<std::string> command;
};

// `word` quoted for a POSIX shell: 'it'"'"'s'.
std::string shell_quoted(const std::string& word) {
  std::string out = "'";
  for (char c : word) out += c == '\'' ? std::string("'\"'\"'") : std::string(1, c);
  return out + "'";
}

std::string this_program() {
  char path[4096];
  const ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
  if (n <= 0) throw std::runtime_error("launch: cannot find this program's path; pass --program");
  return std::string(path, static_cast<std::size_t>(n));
}

std::vector<std::string> words_of(const std::string& text) {
  std::istringstream in(text);
  std::vector<std::string> words;
  for (std::string w; in >> w;) words.push_back(w);
  return words;
}

// The path execvp would run for `name`; std::invalid_argument naming `flag` and the program when none.
std::string find_program(const std::string& name, const std::string& flag) {
  const auto runnable = [](const std::string& path) {
    struct stat st {};
    return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(path.c_str(), X_OK) == 0;
  };
  if (name.find('/') != std::string::npos) {
    if (runnable(name)) return name;
    throw std::invalid_argument(flag + ": " + name + (access(name.c_str(), F_OK) == 0 ? " is not an executable file"
                                                                                       : " does not exist"));
  }
  const char* env = std::getenv("PATH");
  const std::string path = env ? env : "/usr/bin:/bin";
  std::size_t start = 0;
  while (start <= path.size()) {
    const std::size_t colon = std::min(path.find(':', start), path.size());
    const std::string folder = path.substr(start, colon - start);
    const std::string candidate = (folder.empty() ? std::string(".") : folder) + "/" + name;
    if (runnable(candidate)) return candidate;
    start = colon + 1;
  }
  throw std::invalid_argument(flag + ": the program '" + name + "' is not on PATH (" + path + ")");
}

// One rank's process, its output read line by line on threads of its own.
struct rank_process {
  int rank = 0;
  std::string host;
  pid_t pid = -1;        // also its process group's id
  int stdin_fd = -1;  // closed, the rank stops
  int status = -1;
  bool exited = false;
  bool stopped = false;  // after another rank failed
  std::vector<std::thread> readers;
  std::atomic<int> readers_done{0};
  std::mutex said_mutex;
  std::string last_line, error_line;
  // Why it failed: its error line, else its last line on stderr.
  std::string reason() {
    std::lock_guard<std::mutex> lock(said_mutex);
    return !error_line.empty() ? error_line : last_line;
  }
};

std::mutex output_mutex;

// `said` (may be null) keeps the last line and the last "error: ..." line.
void forward_lines(int fd, std::ostream& out, const std::string& prefix, rank_process* said) {
  std::string pending;
  char buffer[4096];
  const auto emit = [&](const std::string& line) {
    {
      std::lock_guard<std::mutex> lock(output_mutex);
      out << prefix << line << "\n" << std::flush;
    }
    if (!said || line.empty()) return;
    std::lock_guard<std::mutex> lock(said->said_mutex);
    said->last_line = line;
    if (line.rfind("error: ", 0) == 0) said->error_line = line;
  };
  while (true) {
    const ssize_t n = read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    pending.append(buffer, static_cast<std::size_t>(n));
    for (std::size_t end; (end = pending.find('\n')) != std::string::npos; pending.erase(0, end + 1))
      emit(pending.substr(0, end));
  }
  if (!pending.empty()) emit(pending);
  close(fd);
}

// Ends its standard input: the rank stops wherever it runs (Note [launch over ssh]).
void close_stdin(rank_process& p) {
  if (p.stdin_fd >= 0) close(p.stdin_fd);
  p.stdin_fd = -1;
}

void start(rank_process& p, const std::vector<std::string>& argv) {
  int in[2], out[2], err[2];
  if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0)
    throw std::runtime_error("launch: pipe failed");
  std::vector<char*> args;
  std::vector<std::string> copy = argv;
  for (auto& a : copy) args.push_back(a.data());
  args.push_back(nullptr);
  const pid_t parent = getpid();
  p.pid = fork();
  if (p.pid < 0) throw std::runtime_error("launch: fork failed");
  if (p.pid == 0) {  // only async-signal-safe calls until exec
    prctl(PR_SET_PDEATHSIG, SIGTERM);  // the launcher gone, so is every rank
    if (getppid() != parent) _exit(111);
    setpgid(0, 0);
    dup2(in[0], STDIN_FILENO);
    dup2(out[1], STDOUT_FILENO);
    dup2(err[1], STDERR_FILENO);
    execvp(args[0], args.data());
    _exit(127);
  }
  setpgid(p.pid, p.pid);  // a kill of its group may precede the child's call
  close(in[0]);
  close(out[1]);
  close(err[1]);
  p.stdin_fd = in[1];
  const std::string prefix = "[" + p.host + " rank " + std::to_string(p.rank) + "] ";
  p.readers.emplace_back([&p, fd = out[0], prefix] {
    forward_lines(fd, p.rank == 0 ? std::cout : std::cerr, p.rank == 0 ? std::string() : prefix, nullptr);
    ++p.readers_done;
  });
  p.readers.emplace_back([&p, fd = err[0], prefix] {
    forward_lines(fd, std::cerr, prefix, &p);
    ++p.readers_done;
  });
}

bool reap(rank_process& p, bool block) {
  if (p.exited) return true;
  int status = 0;
  const pid_t done = waitpid(p.pid, &status, block ? 0 : WNOHANG);
  if (done != p.pid) return false;
  p.exited = true;
  p.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return true;
}

int launch(const launch_options& o) {
  std::ifstream file(o.hostfile);
  if (!file) throw std::invalid_argument("--hostfile " + o.hostfile + ": cannot read it");
  std::stringstream text;
  text << file.rdbuf();
  const std::vector<std::string> hosts = rank_hosts(parse_hostfile(text.str(), o.hostfile));
  if (o.command.empty() || o.command.front() != "train")
    throw std::invalid_argument("launch: the command after -- must be `train ...` (it runs on every rank)");
  for (const std::string& word : o.command)
    if (word == "--rendezvous" || word == "--nodes" || word.rfind("--rendezvous=", 0) == 0 || word.rfind("--nodes=", 0) == 0)
      throw std::invalid_argument("launch: leave " + word + " out of the command: launch finds the nodes itself "
                                  "(--rendezvous env)");
  if (!o.certs.empty())
    for (const std::string& word : o.command)
      if (word.rfind("--tls-", 0) == 0 || word == "--insecure")
        throw std::invalid_argument("launch: leave " + word + " out of the command: --certs gives every rank its files");
  if (hosts.size() < 2)
    throw std::invalid_argument("launch: " + o.hostfile + " gives 1 slot: a job needs rank 0 and at least one node");
  if (is_ipv6_literal(hosts[0]))
    throw std::invalid_argument("launch: " + o.hostfile + ": rank 0's host " + hosts[0] +
                                " is an IPv6 address, and the rendezvous reaches rank 0 over IPv4: list a host name or "
                                "an IPv4 address first");
  const std::string program = o.program.empty() ? this_program() : o.program;
  const std::vector<std::string> ssh = words_of(o.ssh);
  if (ssh.empty()) throw std::invalid_argument("--ssh: empty command");
  find_program(ssh.front(), "launch --ssh");  // else "exited 127" names nothing
  const auto certificate = [&](int r) {  // rank 0 is the coordinator
    return o.certs + "/" + (r == 0 ? std::string("coordinator") : hosts[static_cast<std::size_t>(r)]);
  };
  if (!o.certs.empty() && access(o.certs.c_str(), R_OK | X_OK) == 0)  // readable here
    for (int r = 0; r < static_cast<int>(hosts.size()); ++r)
      for (const std::string& file : {o.certs + "/ca.pem", certificate(r) + ".pem", certificate(r) + ".key"})
        if (access(file.c_str(), R_OK) != 0)
          throw std::invalid_argument("launch --certs: " + file + " (rank " + std::to_string(r) + " on " +
                                      hosts[static_cast<std::size_t>(r)] + ") is missing or unreadable: make it with "
                                      "`actorpipe certs --out " + o.certs + " HOST...` naming every host");
  const int world = static_cast<int>(hosts.size());
  std::cerr << "launch: " << world << " ranks on " << o.hostfile << ", rank 0 on " << hosts[0] << ":" << o.master_port
            << "\n";
  std::vector<std::unique_ptr<rank_process>> ranks;
  for (int r = 0; r < world; ++r) {
    std::string remote = "env ACTORPIPE_LAUNCH_STDIN=1 RANK=" + std::to_string(r) + " WORLD_SIZE=" + std::to_string(world) +
                         " MASTER_ADDR=" + shell_quoted(hosts[0]) + " MASTER_PORT=" + std::to_string(o.master_port) +
                         " " + shell_quoted(program);
    for (const std::string& word : o.command) remote += " " + shell_quoted(word);
    remote += " --rendezvous env";
    if (!o.certs.empty()) {
      const std::string name = certificate(r);
      remote += " --tls-ca " + shell_quoted(o.certs + "/ca.pem") + " --tls-cert " + shell_quoted(name + ".pem") +
                " --tls-key " + shell_quoted(name + ".key");
    }
    std::vector<std::string> argv = ssh;
    argv.push_back(hosts[static_cast<std::size_t>(r)]);
    argv.push_back(remote);
    auto p = std::make_unique<rank_process>();
    p->rank = r;
    p->host = hosts[static_cast<std::size_t>(r)];
    start(*p, argv);
    ranks.push_back(std::move(p));
  }
  // Rank 0 ends the job (or dies, and the nodes stop too); a node that fails first ends it at once.
  rank_process* first_failed = nullptr;
  while (!reap(*ranks[0], false)) {
    for (std::size_t r = 1; r < ranks.size() && !first_failed; ++r)
      if (reap(*ranks[r], false) && ranks[r]->status != 0) first_failed = ranks[r].get();
    if (first_failed) {  // rank 0's end is the news
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      if (reap(*ranks[0], false)) first_failed = nullptr;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (first_failed) {
    // Its last lines may still be in the pipe: its readers end with it.
    const auto said_by = std::chrono::steady_clock::now() + std::chrono::seconds(1);
    while (first_failed->readers_done < 2 && std::chrono::steady_clock::now() < said_by)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    const std::string why = first_failed->reason();
    std::cerr << "launch: rank " << first_failed->rank << " on " << first_failed->host << " failed (exited "
              << first_failed->status << (why.empty() ? std::string() : ": " + why)
              << ") before rank 0 ended the job: stopping the other ranks\n";
    for (auto& p : ranks)
      if (!reap(*p, false)) {
        p->stopped = true;
        close_stdin(*p);
      }
  }
  // After a failed rank the others are stopped at once.
  const bool failed_early = first_failed != nullptr || ranks[0]->status != 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(failed_early ? 2 : 30);
  for (auto& p : ranks)
    while (!reap(*p, false)) {
      if (std::chrono::steady_clock::now() > deadline) {
        if (!p->stopped)
          std::cerr << "launch: rank " << p->rank << " on " << p->host << " still ran after rank 0 ended: killed\n";
        close_stdin(*p);
        kill(-p->pid, SIGKILL);  // the ssh client, or whatever --ssh started
        reap(*p, true);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  for (auto& p : ranks) {
    close_stdin(*p);
    for (auto& t : p->readers) t.join();
  }
  int failed = first_failed ? first_failed->status : 0;
  for (const auto& p : ranks) {
    if (p->stopped) {
      std::cerr << "launch: rank " << p->rank << " on " << p->host << " stopped after rank " << first_failed->rank
                << " failed\n";
    } else if (p->status != 0) {
      const std::string why = p->reason();
      std::cerr << "launch: rank " << p->rank << " on " << p->host << " exited " << p->status
                << (why.empty() ? std::string() : " (" + why + ")") << "\n";
      if (failed == 0) failed = p->status;
    }
  }
  if (failed == 0) std::cerr << "launch: all " << world << " ranks exited 0\n";
  return failed;
}

}  // namespace

void add_launch_command(CLI::App& app) {
  auto o = std::make_shared<launch_options>();
  auto* cmd = app.add_subcommand(
      "launch", "start a whole job over ssh from a hostfile: `launch --hostfile hosts -- train --stages 4 ...` "
                "(Note [launch over ssh])");
  cmd->add_option("--hostfile", o->hostfile, "one host per line: host [slots=N] (mpirun, DeepSpeed); rank 0 is the first")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--ssh", o->ssh, "the command that runs a shell command on a host: CMD HOST 'COMMAND'")
      ->capture_default_str();
  cmd->add_option("--master-port", o->master_port, "the port rank 0 listens on for the nodes")
      ->check(whole_number(1, 65535))
      ->capture_default_str();
  cmd->add_option("--program", o->program, "the actorpipe binary on the hosts (default: this one's path)");
  cmd->add_option("--certs", o->certs,
                  "a folder every host can read, made by `actorpipe certs --out DIR HOST...`: rank 0 presents "
                  "coordinator.pem, a node its host's HOST.pem, all trust ca.pem (mutual TLS)");
  cmd->add_option("command", o->command, "-- train ... (run on every rank with --rendezvous env)")->required();
  cmd->callback([o] {
    const int code = launch(*o);
    if (code != 0) throw CLI::RuntimeError(code);
  });
}

}  // namespace ap::cli

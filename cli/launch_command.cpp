// `actorpipe launch --hostfile FILE [--ssh CMD] -- train ...`: a whole job from one command on one machine.
//
// Note [launch over ssh]
// The hostfile (mpirun's and DeepSpeed's format: "host slots=N") gives the job's ranks in order, rank 0 the
// first host's first slot. For each rank the launcher runs `CMD HOST 'env RANK=r WORLD_SIZE=W MASTER_ADDR=<rank
// 0's host> MASTER_PORT=P PROGRAM train ... --rendezvous env'` (CMD: `ssh -o BatchMode=yes` by default; the
// remote command is one shell string, every word quoted, as ssh passes it), so the rendezvous of Note
// [environment rendezvous] joins them: rank 0 trains, the others are its nodes. Every line a rank prints comes
// back prefixed with its host and rank on stderr, except rank 0's stdout (the run's JSON line), which stays
// the launcher's stdout unchanged. The launcher waits for rank 0, then for the nodes, which stop by
// themselves when rank 0 ends the job or dies: up to 30 s after a rank 0 that succeeded, 2 s after one that
// failed (a node that never reached it would retry for minutes); any still running then is killed. It exits
// with rank 0's status, or the first failed node's; its ranks die with it (they are started with a parent-death
// signal: the local ssh clients, whose ends close the connections). PROGRAM is this binary's path (--program for another one on the hosts).
// With --certs DIR (`actorpipe certs --out DIR HOST...`, Note [cluster certificates]) rank 0 presents
// DIR/coordinator.pem and a node DIR/HOST.pem, each with its key, all trusting DIR/ca.pem.
// Tests pass `--ssh scripts/local_ssh.sh`, a stand-in that runs the command here, so the whole path runs on
// loopback.
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
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
  std::string certs;    // a folder of `actorpipe certs`: each rank's --tls-* flags
  std::vector<std::string> command;  // train ...
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

// One rank's process: its stdout and stderr read line by line on threads of their own.
struct rank_process {
  int rank = 0;
  std::string host;
  pid_t pid = -1;
  int status = -1;
  bool exited = false;
  std::vector<std::thread> readers;
};

std::mutex output_mutex;

void forward_lines(int fd, std::ostream& out, const std::string& prefix) {
  std::string pending;
  char buffer[4096];
  while (true) {
    const ssize_t n = read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    pending.append(buffer, static_cast<std::size_t>(n));
    for (std::size_t end; (end = pending.find('\n')) != std::string::npos; pending.erase(0, end + 1)) {
      std::lock_guard<std::mutex> lock(output_mutex);
      out << prefix << pending.substr(0, end) << "\n" << std::flush;
    }
  }
  if (!pending.empty()) {
    std::lock_guard<std::mutex> lock(output_mutex);
    out << prefix << pending << "\n" << std::flush;
  }
  close(fd);
}

void start(rank_process& p, const std::vector<std::string>& argv) {
  int out[2], err[2];
  if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) throw std::runtime_error("launch: pipe failed");
  std::vector<char*> args;
  std::vector<std::string> copy = argv;
  for (auto& a : copy) args.push_back(a.data());
  args.push_back(nullptr);
  const pid_t parent = getpid();
  p.pid = fork();
  if (p.pid < 0) throw std::runtime_error("launch: fork failed");
  if (p.pid == 0) {  // only async-signal-safe calls until exec
    prctl(PR_SET_PDEATHSIG, SIGTERM);  // the launcher gone: so is every rank it started
    if (getppid() != parent) _exit(111);
    dup2(out[1], STDOUT_FILENO);
    dup2(err[1], STDERR_FILENO);
    execvp(args[0], args.data());
    _exit(127);
  }
  close(out[1]);
  close(err[1]);
  const std::string prefix = "[" + p.host + " rank " + std::to_string(p.rank) + "] ";
  p.readers.emplace_back(forward_lines, out[0], std::ref(p.rank == 0 ? std::cout : std::cerr),
                         p.rank == 0 ? std::string() : prefix);
  p.readers.emplace_back(forward_lines, err[0], std::ref(std::cerr), prefix);
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
  const std::string program = o.program.empty() ? this_program() : o.program;
  const std::vector<std::string> ssh = words_of(o.ssh);
  if (ssh.empty()) throw std::invalid_argument("--ssh: empty command");
  const int world = static_cast<int>(hosts.size());
  std::cerr << "launch: " << world << " ranks on " << o.hostfile << ", rank 0 on " << hosts[0] << ":" << o.master_port
            << "\n";
  std::vector<std::unique_ptr<rank_process>> ranks;
  for (int r = 0; r < world; ++r) {
    std::string remote = "env RANK=" + std::to_string(r) + " WORLD_SIZE=" + std::to_string(world) +
                         " MASTER_ADDR=" + shell_quoted(hosts[0]) + " MASTER_PORT=" + std::to_string(o.master_port) +
                         " " + shell_quoted(program);
    for (const std::string& word : o.command) remote += " " + shell_quoted(word);
    remote += " --rendezvous env";
    if (!o.certs.empty()) {  // rank 0 is the coordinator; a node presents its host's certificate
      const std::string name = o.certs + "/" + (r == 0 ? std::string("coordinator") : hosts[static_cast<std::size_t>(r)]);
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
  reap(*ranks[0], true);  // rank 0 ends the job (or dies, and the nodes stop too)
  // After a failed rank 0 the nodes are stopped at once (one that never reached it would retry for minutes).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(ranks[0]->status == 0 ? 30 : 2);
  for (auto& p : ranks)
    while (!reap(*p, false)) {
      if (std::chrono::steady_clock::now() > deadline) {
        std::cerr << "launch: rank " << p->rank << " on " << p->host << " still ran after rank 0 ended: killed\n";
        kill(p->pid, SIGKILL);
        reap(*p, true);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  for (auto& p : ranks)
    for (auto& t : p->readers) t.join();
  int failed = 0;
  for (const auto& p : ranks)
    if (p->status != 0) {
      std::cerr << "launch: rank " << p->rank << " on " << p->host << " exited " << p->status << "\n";
      if (failed == 0) failed = p->status;
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

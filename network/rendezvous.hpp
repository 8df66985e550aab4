// One command per process starts a whole job: each process learns its rank and the coordinator's address from
// the environment (torchrun's variables or Slurm's), the nodes tell the coordinator where they listen, and the
// job's end (or the coordinator's death) ends every node (Note [environment rendezvous]).
#pragma once

#include <chrono>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace ap {

// Note [environment rendezvous]:
// `actorpipe train --rendezvous env` runs in every process of a job: the process of rank 0 is the coordinator
// and every other rank is a node (`node --rendezvous env` starts a node alone the same way). The ranks come
// from torchrun's variables (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) or, without them, Slurm's
// (SLURM_PROCID, SLURM_NTASKS, SLURM_STEP_NODELIST or SLURM_JOB_NODELIST, whose first host is the coordinator's,
// and MASTER_PORT or 29500), so `srun -n 5 actorpipe train --rendezvous env --stages 4 ...` or any launcher that
// sets them runs a whole job.
// Rank 0 listens on MASTER_PORT for a plain TCP line from each node, "actorpipe-rendezvous 1 rank R at
// HOST:PORT": a node first connects (retrying until the timeout: rank 0 may start later), listens for the
// coordinator on the local address of that connection (the address that reaches the coordinator) at a free
// port, then registers it. Once every rank has, rank 0 trains with the nodes in rank order (`--nodes`: stage
// s on rank s % (world - 1) + 1). The connections stay open for the job: rank 0 writes "done" at its end and
// closes them; a node reads that and stops (exit 0), or reads the end of the stream without it (the
// coordinator failed or was killed: the system closes its sockets) and stops too (exit 1), so no node is
// left running. The line carries no secret: with TLS, the coordinator's connection to each node is mutual
// TLS as with --nodes, so a wrong registration fails there, naming the node.

// Note [restart under a rendezvous]: a node of rank R listens on MASTER_PORT + R (a free port, said in its
// log, only when that one is taken), so a node started again with the same variables (by a supervisor, a
// script, or a launcher that restarts one rank) listens where it did. With `--restart-on-failure`, the
// coordinator's recovery waits for the lost node at that address (Note [recovery]) and finds the new process
// there. Rank 0 keeps accepting registrations for the whole job: a restarted rank's replaces its old connection,
// so the job's end reaches the new process too; a rank registering at another address is logged (the
// recovery cannot find it there).

// Note [rendezvous fails fast]: what a rank can check alone is checked before it waits for anyone: its transport
// (the TLS files, or --insecure), and on a node that MASTER_ADDR resolves (a name the resolver does not know fails
// at once, naming it; only a resolver that did not answer is asked again). The wait itself (rank 0 for every
// node, a node for rank 0) lasts `--rendezvous-timeout` seconds (default 120, as torchrun's rendezvous timeout),
// and its expiry names the address waited at.
inline constexpr std::chrono::seconds default_rendezvous_timeout{120};

struct rendezvous_env {
  int rank = 0, world_size = 1;
  std::string master_host;
  int master_port = 29500;
  std::string source;  // "RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT" or "SLURM_PROCID, ..."
};

// From the environment (`get` is getenv, or a stand-in in tests). Throws std::invalid_argument naming the missing
// or bad variable: neither set, a rank outside 0..WORLD_SIZE-1, a port outside 1..65535, an unreadable host list.
rendezvous_env rendezvous_from_env(const std::function<const char*(const char*)>& get);

// The port each rank's node listens on (Note [restart under a rendezvous]): MASTER_PORT + rank, or 0 (a free
// one) past 65535.
int rendezvous_node_port(const rendezvous_env& env);

// Slurm's host-list syntax expanded: "node[01-03,7],gpu5" -> node01 node02 node03 node7 gpu5 (zero padding
// kept). Throws std::invalid_argument naming the list for an unclosed bracket or a bad range.
std::vector<std::string> expand_slurm_hostlist(const std::string& list);

// "120 s", "1.5 s", "250 ms": a wait as the rendezvous's texts say it.
std::string wait_text(std::chrono::milliseconds wait);

// Rank 0's side: listens on `port` at once (a port in use is refused, naming it) for `world_size - 1`
// registrations. `master_host` (MASTER_ADDR, may be empty) only names the address in the timeout's text.
class rendezvous_server {
 public:
  rendezvous_server(int port, int world_size, std::chrono::milliseconds timeout, const std::string& master_host = "");
  ~rendezvous_server();  // closes the nodes' connections: without release(true) first, they stop as failed
  rendezvous_server(const rendezvous_server&) = delete;
  rendezvous_server& operator=(const rendezvous_server&) = delete;

  // The nodes' "host:port" in rank order (ranks 1..world_size-1). Throws std::runtime_error naming the ranks
  // that did not register within the timeout (with the address waited at), and any registration it cannot accept
  // (a rank out of range or given twice, a bad line).
  std::vector<std::string> wait_for_nodes();
  // Tells every node the job is over ("done") and closes the connections.
  void release();
  int port() const { return port_; }  // the one listened on (the system's pick for 0)
  // Where the registrations after wait_for_nodes go (Note [restart under a rendezvous]): one line each. Set
  // before wait_for_nodes.
  std::function<void(const std::string&)> log;

 private:
  // After wait_for_nodes until release or the end: a restarted rank's registration replaces its connection.
  void accept_late_registrations();

  int listen_fd_ = -1, port_ = 0, world_size_ = 1;
  std::chrono::milliseconds timeout_;
  std::string master_host_;
  std::mutex mutex_;                   // node_fds_, stopping_ (the late registrations' thread and the caller)
  std::vector<int> node_fds_;          // by rank (index 0 unused)
  std::vector<std::string> addresses_; // by rank, as first registered
  bool stopping_ = false;
  std::thread late_;
};

// A node's side: connects to rank 0, retrying a refused connection until `timeout`. Throws std::runtime_error at
// once when MASTER_ADDR does not resolve (Note [rendezvous fails fast]), and at the timeout naming rank 0's address.
class rendezvous_client {
 public:
  rendezvous_client(const rendezvous_env& env, std::chrono::milliseconds timeout);
  ~rendezvous_client();
  rendezvous_client(const rendezvous_client&) = delete;
  rendezvous_client& operator=(const rendezvous_client&) = delete;

  // This machine's address on the connection to rank 0: where the coordinator can reach the node.
  const std::string& local_address() const { return local_; }
  // Registers the node: rank `env.rank` listens at local_address():port.
  void register_node(int port);
  // Blocks until rank 0 ends the job: true when it said "done", false when its connection ended without it
  // (or cancel() was called from another thread).
  bool wait_for_release();
  void cancel();

 private:
  rendezvous_env env_;
  int fd_ = -1;
  std::string local_;
};

}  // namespace ap

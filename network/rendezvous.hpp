// One command per process starts a whole job from torchrun's or Slurm's environment (Note [environment
// rendezvous]).
#pragma once

#include <chrono>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace ap {

// Note [environment rendezvous]: `train --rendezvous env` runs in every process of a job: rank 0 is the coordinator,
// every other rank a node. Ranks come from torchrun's variables (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) or else
// Slurm's. Each node connects to rank 0 on MASTER_PORT, listens on that connection's local address and registers
// with one plain line, "actorpipe-rendezvous 1 rank R at HOST:PORT"; then rank 0 trains with the nodes in rank
// order. The connections stay open: rank 0 writes "done" at the end (nodes exit 0); a stream ending without it means
// the coordinator died (nodes exit 1), so no node is left running. The line carries no secret: with TLS, a wrong
// registration fails in the coordinator's mutual TLS connection to the node.

// Note [restart under a rendezvous]: a node of rank R listens on MASTER_PORT + R (a free port, logged, if taken), so
// a node restarted with the same variables listens where it did and recovery (Note [recovery]) finds it. Rank 0
// accepts registrations for the whole job: a restarted rank's replaces its old connection.

// Note [joining nodes]: with `accept_joins`, rank 0 also takes registrations of nodes that were not in the job
// ("actorpipe-rendezvous 1 join at HOST:PORT", from `actorpipe node --join`), at any time; joined() lists them for an
// elastic run (Note [elastic runs]), and release() ends them with the job. Without it a joining node is refused.

// Note [rendezvous fails fast]: what a rank can check alone (its transport; on a node, that MASTER_ADDR resolves) is
// checked before it waits. The wait lasts `--rendezvous-timeout` seconds (default 120, as torchrun's) and its
// expiry names the address waited at.
inline constexpr std::chrono::seconds default_rendezvous_timeout{120};

struct rendezvous_env {
  int rank = 0, world_size = 1;
  std::string master_host;
  int master_port = 29500;
  std::string source;  // "RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT" or "SLURM_PROCID, ..."
};

// From the environment (`get`: getenv, or a stand-in). Throws std::invalid_argument naming the missing or bad
// variable.
rendezvous_env rendezvous_from_env(const std::function<const char*(const char*)>& get);

// MASTER_PORT + rank, or 0 (a free one) past 65535 (Note [restart under a rendezvous]).
int rendezvous_node_port(const rendezvous_env& env);

// "node[01-03,7],gpu5" -> node01 node02 node03 node7 gpu5. Throws std::invalid_argument naming the list.
std::vector<std::string> expand_slurm_hostlist(const std::string& list);

// "120 s", "1.5 s", "250 ms": a wait as the rendezvous's texts say it.
std::string wait_text(std::chrono::milliseconds wait);

// Rank 0's side: listens on `port` at once for `world_size - 1` registrations. `master_host` only names the
// address in the timeout's text.
class rendezvous_server {
 public:
  rendezvous_server(int port, int world_size, std::chrono::milliseconds timeout, const std::string& master_host = "",
                    bool accept_joins = false);
  ~rendezvous_server();  // closes the nodes' connections: without release(true) first, they stop as failed
  rendezvous_server(const rendezvous_server&) = delete;
  rendezvous_server& operator=(const rendezvous_server&) = delete;

  // The nodes' "host:port" in rank order. Throws std::runtime_error naming the ranks missing at the timeout, or a
  // bad registration.
  std::vector<std::string> wait_for_nodes();
  // Tells every node the job is over ("done") and closes the connections.
  void release();
  int port() const { return port_; }  // the one listened on (the system's pick for 0)
  // The joining nodes' "host:port" in the order they registered (Note [joining nodes]); any thread.
  std::vector<std::string> joined();
  // Hears of each registration after wait_for_nodes (Note [restart under a rendezvous]). Set before it.
  std::function<void(const std::string&)> log;

 private:
  void accept_late_registrations();
  // A joining node's registration on `fd`: kept, or refused (Note [joining nodes]). Holds mutex_.
  void take_join(int fd, const std::string& address);

  int listen_fd_ = -1, port_ = 0, world_size_ = 1;
  std::chrono::milliseconds timeout_;
  std::string master_host_;
  std::mutex mutex_;                   // node_fds_, stopping_
  std::vector<int> node_fds_;          // by rank (index 0 unused)
  std::vector<std::string> addresses_; // by rank, as first registered
  bool stopping_ = false;
  bool accept_joins_ = false;
  std::vector<int> joined_fds_;
  std::vector<std::string> joined_;
  std::thread late_;
};

// A node's side: connects to rank 0, retrying until `timeout`. Throws std::runtime_error naming rank 0's address
// (Note [rendezvous fails fast]). A joining node (Note [joining nodes]) has rank -1.
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
  // Blocks until rank 0 ends the job: true when it said "done", false otherwise (or after cancel()); refusal()
  // then holds rank 0's reason when it refused the node.
  bool wait_for_release();
  const std::string& refusal() const { return refusal_; }
  std::string who() const;  // "rank R", or "the joining node"
  void cancel();

 private:
  rendezvous_env env_;
  int fd_ = -1;
  std::string local_, refusal_;
};

}  // namespace ap

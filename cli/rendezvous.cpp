#include "cli/rendezvous.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <stdexcept>
#include <string>
#include <thread>

namespace ap::cli {

namespace {

// Under `launch`, the end of standard input stops the rank at once (Note [launch over ssh]).
void stop_when_stdin_ends(int rank) {
  std::thread([rank] {
    char buffer[256];
    for (;;) {
      const ssize_t n = read(STDIN_FILENO, buffer, sizeof buffer);
      if (n > 0 || (n < 0 && errno == EINTR)) continue;
      break;
    }
    std::fprintf(stderr, "error: rendezvous: rank %d: the launcher stopped the job (standard input ended)\n", rank);
    std::fflush(stderr);
    std::_Exit(1);
  }).detach();
}

}  // namespace

rendezvous_env rendezvous_place() {
  const rendezvous_env env = rendezvous_from_env([](const char* name) { return std::getenv(name); });
  std::cerr << "rendezvous: rank " << env.rank << " of " << env.world_size << " (from " << env.source << "), rank 0 at "
            << env.master_host << ":" << env.master_port << "\n";
  if (const char* launched = std::getenv("ACTORPIPE_LAUNCH_STDIN"); launched && std::string(launched) == "1")
    stop_when_stdin_ends(env.rank);
  return env;
}

void run_rendezvous_node(const rendezvous_env& env, node_run_options options, std::chrono::milliseconds timeout,
                         const std::string& who) {
  check_transport_security(options.security, who);  // Note [rendezvous fails fast]
  rendezvous_client client(env, timeout);
  const std::string me = client.who();
  options.host = client.local_address();
  if (env.rank >= 0) options.port = rendezvous_node_port(env);  // Note [restart under a rendezvous]
  options.any_port_if_taken = true;
  options.on_listening = [&](const std::string& host, std::uint16_t port) {
    client.register_node(port);
    std::cerr << "rendezvous: " << me << " registered as the node at " << host << ":" << port << "\n";
  };
  bool done = false;
  options.until_released = [&] { done = client.wait_for_release(); };
  options.cancel_release = [&] { client.cancel(); };
  const std::string rank0 = "rank 0 (" + env.master_host + ":" + std::to_string(env.master_port) + ")";
  const auto failure = [&] {
    return "rendezvous: " + me + ": " + rank0 +
           (client.refusal().empty() ? " went away without ending the job (it failed or was killed)"
                                     : " refused it: " + client.refusal());
  };
  options.on_stopped = [&] {  // Note [a node's shutdown]
    if (done) std::cerr << "rendezvous: " << me << ": the job is over" << std::endl;
    return done ? node_exit{0, ""} : node_exit{1, "error: " + failure()};
  };
  run_node(options);
  if (!done) throw std::runtime_error(failure());
}

void run_rendezvous_coordinator(const rendezvous_env& env, std::chrono::milliseconds timeout, bool accept_joins,
                                const std::function<void(std::vector<std::string>, joined_nodes)>& train) {
  rendezvous_server server(env.master_port, env.world_size, timeout, env.master_host, accept_joins);
  server.log = [](const std::string& line) { std::cerr << line << "\n"; };
  std::vector<std::string> nodes = server.wait_for_nodes();
  std::string list;
  for (const auto& n : nodes) list += (list.empty() ? "" : ",") + n;
  std::cerr << "rendezvous: " << nodes.size() << " nodes registered: " << list << "\n";
  train(std::move(nodes), [&server] { return server.joined(); });  // on a throw, nodes see no "done"
  server.release();
}

}  // namespace ap::cli

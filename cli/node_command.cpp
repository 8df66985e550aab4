// `actorpipe node`: a worker process that hosts pipeline stages for a coordinator (`actorpipe train --nodes`).
// The loop itself is ap::run_node (actors/run_node.hpp), which a user's own node binary calls too.
#include <memory>

#include "actors/run_node.hpp"
#include "cli/checks.hpp"
#include "cli/commands.hpp"
#include "cli/rendezvous.hpp"
#include "cli/transport_flags.hpp"
#include "network/node_address.hpp"

namespace ap::cli {

void add_node_command(CLI::App& app) {
  auto o = std::make_shared<node_run_options>();
  auto* cmd = app.add_subcommand("node", "run a worker process that hosts pipeline stages for `train --nodes`");
  cmd->add_option("--host", o->host, "address to listen on")->capture_default_str();
  cmd->add_option("--port", o->port, "port to listen on (0: a free one, printed on stdout)")
      ->check(whole_number(0, 65535))
      ->capture_default_str();
  cmd->add_option("--threads", o->threads,
                  "intra-op threads of every rank the node hosts, pinned to its own cores where they fit; 0: as "
                  "`train --threads` asks, else this machine's cores divided among the ranks it hosts")
      ->check(whole_number(0, 1024))
      ->capture_default_str();
  cmd->add_option("--protocol-version", o->protocol_version, "claim another wire protocol version (tests)")
      ->check(whole_number(0, 1u << 30))
      ->group("");
  auto rendezvous = std::make_shared<std::string>();
  auto* rendezvous_flag =
      cmd->add_option("--rendezvous", *rendezvous,
                      "env: the job's rank (> 0), and rank 0's address, from the environment (torchrun's RANK, "
                      "WORLD_SIZE, MASTER_ADDR, MASTER_PORT, or Slurm's); listens where it reaches rank 0, registers "
                      "there, and stops when the job ends (Note [environment rendezvous])")
          ->check(CLI::IsMember({"env"}));
  auto join = std::make_shared<std::string>();
  auto* join_flag = cmd->add_option("--join", *join,
                                    "HOST:PORT: join a running job started with `train --rendezvous env --elastic MIN`, "
                                    "whose rank 0 is at HOST:PORT (MASTER_ADDR:MASTER_PORT); listens where it reaches "
                                    "rank 0 (on --port), and the run takes it in at a checkpoint (Note [joining nodes])")
                        ->excludes(rendezvous_flag);
  auto wait_s = std::make_shared<long>(default_rendezvous_timeout.count());
  auto* wait_flag = cmd->add_option("--rendezvous-timeout", *wait_s,
                                    "with --rendezvous env or --join: seconds to wait for rank 0 to answer (the ranks of a job "
                                    "start within this of each other)")
                        ->check(whole_number(1, 1000000))
                        ->capture_default_str();
  cmd->get_option("--host")->excludes(rendezvous_flag);
  cmd->get_option("--port")->excludes(rendezvous_flag);
  cmd->get_option("--host")->excludes(join_flag);
  add_transport_flags(cmd, o->security);  // checked by run_node before it listens
  cmd->callback([o, rendezvous, join, wait_s, wait_flag] {
    if (!join->empty()) {
      const node_address rank0 = parse_node_address(*join);  // std::invalid_argument naming it
      rendezvous_env env;
      env.rank = -1;
      env.master_host = rank0.host;
      env.master_port = rank0.port;
      env.source = "--join";
      return run_rendezvous_node(env, *o, std::chrono::seconds(*wait_s), "node --join");
    }
    if (rendezvous->empty()) {
      refuse_given({wait_flag}, "requires --rendezvous env or --join: it is the wait for rank 0");
      return run_node(*o);
    }
    const rendezvous_env env = rendezvous_place();
    if (env.rank == 0)
      throw std::invalid_argument("node --rendezvous env: rank 0 is the coordinator; start `train --rendezvous env` "
                                  "there");
    run_rendezvous_node(env, *o, std::chrono::seconds(*wait_s), "node --rendezvous env");
  });
}

}  // namespace ap::cli

// `train --rendezvous env` and `node --rendezvous env`: a job from one command per process
// (Note [environment rendezvous]).
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "actors/run_node.hpp"
#include "network/rendezvous.hpp"

namespace ap::cli {

// This process's place in the job, from the environment, said on stderr.
rendezvous_env rendezvous_place();

// Rank env.rank (> 0) as a node until rank 0 ends the job: checks its transport first (Note [rendezvous fails
// fast]; `who` names the command), reaches rank 0 within `timeout`, registers its free port, serves the
// coordinator. Throws std::runtime_error when rank 0 went away without ending the job. With env.rank -1 the node
// joins a running elastic job on options.port (Note [joining nodes]), and a refusal is thrown with rank 0's reason.
void run_rendezvous_node(const rendezvous_env& env, node_run_options options, std::chrono::milliseconds timeout,
                         const std::string& who);

// The joining nodes registered so far (Note [joining nodes]).
using joined_nodes = std::function<std::vector<std::string>()>;

// Rank 0: waits `timeout` for the nodes, runs `train` with their addresses in rank order and the nodes joining
// (taken only with `accept_joins`), then ends the job for every node; when `train` throws, the nodes see their
// stream end without "done" and stop as failed.
void run_rendezvous_coordinator(const rendezvous_env& env, std::chrono::milliseconds timeout, bool accept_joins,
                                const std::function<void(std::vector<std::string>, joined_nodes)>& train);

}  // namespace ap::cli

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
// coordinator. Throws std::runtime_error when rank 0 went away without ending the job.
void run_rendezvous_node(const rendezvous_env& env, node_run_options options, std::chrono::milliseconds timeout,
                         const std::string& who);

// Rank 0: waits `timeout` for the nodes, runs `train` with their addresses in rank order, then ends the job for
// every node (also when `train` throws, which is rethrown).
void run_rendezvous_coordinator(const rendezvous_env& env, std::chrono::milliseconds timeout,
                                const std::function<void(std::vector<std::string>)>& train);

}  // namespace ap::cli

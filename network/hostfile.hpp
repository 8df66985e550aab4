// The hosts of a job and how many processes each runs, as mpirun and DeepSpeed read a hostfile (`actorpipe
// launch --hostfile`, Note [launch over ssh] in cli/launch_command.cpp).
#pragma once

#include <string>
#include <vector>

namespace ap {

struct host_slots {
  std::string host;
  int slots = 1;
};

// One host per line: "host", "host slots=N" (mpirun, DeepSpeed) or "host:N"; '#' starts a comment, blank lines
// are skipped. Throws std::invalid_argument naming `name`, the line number and what is wrong (a bad or zero
// slot count, an unknown word, the same host twice, no host at all).
std::vector<host_slots> parse_hostfile(const std::string& text, const std::string& name);

// The job's ranks over the hosts in order: rank 0 is the first host's first slot. Element r is rank r's host.
std::vector<std::string> rank_hosts(const std::vector<host_slots>& hosts);

}  // namespace ap

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

// One host per line: "host", "host slots=N" (mpirun, DeepSpeed) or "host:N"; '#' starts a comment. A host is an
// RFC 1123 host name, an IPv4 or an IPv6 address (bare, or "[fe80::1]:2"). Throws std::invalid_argument naming
// `name`, the line number and what is wrong.
std::vector<host_slots> parse_hostfile(const std::string& text, const std::string& name);

// Why `host` is not a host name, an IPv4 or an IPv6 address (as parse_hostfile reads them), or "" when it is one.
std::string host_name_problem(const std::string& host);

// Whether `host` is an IPv6 address (without brackets).
bool is_ipv6_literal(const std::string& host);

// The job's ranks over the hosts in order: rank 0 is the first host's first slot. Element r is rank r's host.
std::vector<std::string> rank_hosts(const std::vector<host_slots>& hosts);

}  // namespace ap

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
// are skipped. A host is a host name (RFC 1123: dot-separated labels of letters, digits and '-', each 1 to 63
// characters, not starting or ending with '-', 253 characters in all), an IPv4 address, or an IPv6 address
// (bare, or in brackets: "[fe80::1]:2"). Throws std::invalid_argument naming `name`, the line number and what is
// wrong (a host that is none of these, its odd bytes written as \xNN; a bad or zero slot count, an unknown word,
// the same host twice, no host at all).
std::vector<host_slots> parse_hostfile(const std::string& text, const std::string& name);

// Why `host` is not a host name, an IPv4 or an IPv6 address (as parse_hostfile reads them), or "" when it is one.
std::string host_name_problem(const std::string& host);

// Whether `host` is an IPv6 address (without brackets).
bool is_ipv6_literal(const std::string& host);

// The job's ranks over the hosts in order: rank 0 is the first host's first slot. Element r is rank r's host.
std::vector<std::string> rank_hosts(const std::vector<host_slots>& hosts);

}  // namespace ap

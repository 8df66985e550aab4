// A job's hosts and slots, read as mpirun and DeepSpeed read a hostfile (Note [launch over ssh]).
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

// Why `host` is not a host name or address, or "" when it is one.
std::string host_name_problem(const std::string& host);

// Whether `host` is an IPv6 address (without brackets).
bool is_ipv6_literal(const std::string& host);

// Element r is rank r's host, filling each host's slots in order.
std::vector<std::string> rank_hosts(const std::vector<host_slots>& hosts);

}  // namespace ap

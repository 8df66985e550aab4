#include "network/hostfile.hpp"

#include <arpa/inet.h>

#include "network/whole_number.hpp"

#include <algorithm>
#include <cstdio>
#include <set>
#include <sstream>
#include <stdexcept>

namespace ap {
namespace {

int slot_count(const std::string& text, const std::string& where) {
  return parse_whole_number(text, 1, 4096, where + ": the slot count");
}

// `text` quoted, bytes outside printable ASCII as \xNN.
std::string shown(const std::string& text) {
  std::string out = "'";
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte >= 0x20 && byte < 0x7f) {
      out += c;
    } else {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\x%02x", byte);
      out += escaped;
    }
  }
  return out + "'";
}

bool is_ipv4_literal(const std::string& host) {
  in_addr a{};
  return inet_pton(AF_INET, host.c_str(), &a) == 1;
}

}  // namespace

bool is_ipv6_literal(const std::string& host) {
  in6_addr a{};
  return inet_pton(AF_INET6, host.c_str(), &a) == 1;
}

std::string host_name_problem(const std::string& host) {
  if (host.empty()) return "an empty host name";
  if (is_ipv4_literal(host) || is_ipv6_literal(host)) return "";
  const std::string what = shown(host) + " is not a host name";
  if (std::all_of(host.begin(), host.end(), [](char c) { return (c >= '0' && c <= '9') || c == '.'; }))
    return what + " (digits and dots, but not an IPv4 address a.b.c.d)";
  if (host.find(':') != std::string::npos) return what + " (a ':' outside an IPv6 address)";
  std::string name = host;
  if (name.back() == '.') name.pop_back();  // a fully qualified name's root
  if (name.size() > 253) return what + " (" + std::to_string(host.size()) + " characters, at most 253)";
  std::size_t start = 0;
  while (start <= name.size()) {
    const std::size_t dot = std::min(name.find('.', start), name.size());
    const std::string label = name.substr(start, dot - start);
    if (label.empty()) return what + " (an empty label between dots)";
    if (label.size() > 63) return what + " (a label of " + std::to_string(label.size()) + " characters, at most 63)";
    for (const char c : label)
      if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-'))
        return what + " (the byte " + shown(std::string(1, c)) +
               ": a name is labels of letters, digits and '-' between dots, RFC 1123)";
    if (label.front() == '-' || label.back() == '-') return what + " (a label starts or ends with '-')";
    start = dot + 1;
  }
  return "";
}

std::vector<host_slots> parse_hostfile(const std::string& text, const std::string& name) {
  std::vector<host_slots> hosts;
  std::set<std::string> seen;
  std::istringstream lines(text);
  int number = 0;
  for (std::string line; std::getline(lines, line);) {
    ++number;
    const std::string where = name + " line " + std::to_string(number);
    if (const auto hash = line.find('#'); hash != std::string::npos) line.erase(hash);
    std::istringstream words(line);
    std::string host;
    if (!(words >> host)) continue;
    host_slots h{host, 1};
    if (host.front() == '[') {  // "[fe80::1]" or "[fe80::1]:N"
      const auto close = host.find(']');
      if (close == std::string::npos) throw std::invalid_argument(where + ": a '[' without its ']' in " + shown(host));
      h.host = host.substr(1, close - 1);
      if (!is_ipv6_literal(h.host))
        throw std::invalid_argument(where + ": " + shown(h.host) + " in brackets is not an IPv6 address");
      const std::string rest = host.substr(close + 1);
      if (!rest.empty() && rest.front() != ':')
        throw std::invalid_argument(where + ": " + shown(rest) + " after the IPv6 address (expected :N or nothing)");
      if (!rest.empty()) h.slots = slot_count(rest.substr(1), where);
    } else if (const auto colon = host.find(':'); colon != std::string::npos && !is_ipv6_literal(host)) {
      h.host = host.substr(0, colon);
      h.slots = slot_count(host.substr(colon + 1), where);
    }
    for (std::string word; words >> word;) {
      if (word.rfind("slots=", 0) == 0)
        h.slots = slot_count(word.substr(6), where);
      else
        throw std::invalid_argument(where + ": unknown '" + word + "' (a line is: host [slots=N])");
    }
    if (h.host.empty()) throw std::invalid_argument(where + ": no host name before ':'");
    if (const std::string why = host_name_problem(h.host); !why.empty()) throw std::invalid_argument(where + ": " + why);
    if (!seen.insert(h.host).second) throw std::invalid_argument(where + ": host " + h.host + " is listed twice");
    hosts.push_back(h);
  }
  if (hosts.empty()) throw std::invalid_argument(name + ": no host in it (a line is: host [slots=N])");
  return hosts;
}

std::vector<std::string> rank_hosts(const std::vector<host_slots>& hosts) {
  std::vector<std::string> ranks;
  for (const host_slots& h : hosts)
    for (int s = 0; s < h.slots; ++s) ranks.push_back(h.host);
  return ranks;
}

}  // namespace ap

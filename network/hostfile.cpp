#include "network/hostfile.hpp"

#include "network/whole_number.hpp"

#include <set>
#include <sstream>
#include <stdexcept>

namespace ap {
namespace {

int slot_count(const std::string& text, const std::string& where) {
  return parse_whole_number(text, 1, 4096, where + ": the slot count");
}

}  // namespace

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
    if (const auto colon = host.find(':'); colon != std::string::npos) {
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

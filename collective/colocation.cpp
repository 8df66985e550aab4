#include "collective/colocation.hpp"

#include <map>

namespace ap {

std::vector<colocated_rank> colocate(const std::vector<std::string>& places) {
  std::map<std::string, int> process_of, size_of;
  for (const std::string& p : places) {
    if (!process_of.count(p)) process_of.emplace(p, static_cast<int>(process_of.size()));
    ++size_of[p];
  }
  std::map<std::string, int> seen;
  std::vector<colocated_rank> out;
  for (const std::string& p : places)
    out.push_back({seen[p]++, size_of.at(p), process_of.at(p), static_cast<int>(process_of.size())});
  return out;
}

}  // namespace ap

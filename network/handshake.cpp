#include "network/handshake.hpp"

#include <algorithm>
#include <cstring>

#include "network/message_types.hpp"

namespace ap {

bool host_is_little_endian() {
  const std::uint32_t one = 1;
  unsigned char first = 0;
  std::memcpy(&first, &one, 1);
  return first == 1;
}

handshake local_handshake(std::uint32_t version) { return handshake{version, host_is_little_endian(), message_type_names()}; }

namespace {

// The names in `a` that `b` lacks, comma-separated.
std::string missing(const std::vector<std::string>& a, const std::vector<std::string>& b) {
  std::string out;
  for (const auto& n : a)
    if (std::find(b.begin(), b.end(), n) == b.end()) out += (out.empty() ? "" : ", ") + n;
  return out;
}

}  // namespace

std::string handshake_mismatch(const handshake& mine, const handshake& theirs, const std::string& me,
                               const std::string& them) {
  if (mine.version != theirs.version)
    return "protocol version mismatch: " + me + " speaks version " + std::to_string(mine.version) + ", " + them +
           " version " + std::to_string(theirs.version);
  if (!mine.little_endian || !theirs.little_endian)
    return "byte order mismatch: tensors travel as raw little-endian floats, but " +
           std::string(!mine.little_endian ? me : them) + " is big-endian";
  if (mine.message_types != theirs.message_types) {
    std::string why = "message types differ:";
    if (auto m = missing(mine.message_types, theirs.message_types); !m.empty()) why += " " + them + " lacks " + m + ";";
    if (auto m = missing(theirs.message_types, mine.message_types); !m.empty()) why += " " + me + " lacks " + m + ";";
    if (why.back() == ':') why += " same names in another order";
    else why.pop_back();
    return why;
  }
  return {};
}

}  // namespace ap

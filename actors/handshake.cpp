#include "actors/handshake.hpp"

#include <algorithm>
#include <cstring>

#include "model/layer_registry.hpp"
#include "actors/message_types.hpp"

namespace ap {

bool host_is_little_endian() {
  const std::uint32_t one = 1;
  unsigned char first = 0;
  std::memcpy(&first, &one, 1);
  return first == 1;
}

handshake local_handshake(std::uint32_t version) {
  return handshake{version, host_is_little_endian(), message_type_names(), registered_layer_kinds()};
}

std::vector<std::string> layer_kinds_lacking(const std::vector<std::string>& used, const std::vector<std::string>& known) {
  std::vector<std::string> lacking;
  for (const auto& k : used)
    if (std::find(known.begin(), known.end(), k) == known.end()) lacking.push_back(k);
  return lacking;
}

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

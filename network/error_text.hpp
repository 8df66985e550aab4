// The text of an error that crossed actors or processes.
#pragma once

#include <string>

#include <caf/error.hpp>
#include <caf/message.hpp>

namespace ap {

// Its context string if it has one (our refusals carry their reason there), else CAF's rendering.
inline std::string error_text(const caf::error& e) {
  if (!e.context().empty() && e.context().match_element<std::string>(0)) return e.context().get_as<std::string>(0);
  return caf::to_string(e);
}

}  // namespace ap

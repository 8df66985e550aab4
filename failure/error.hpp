// What went wrong, as a value: an error_code set where a failure is first seen and carried with its text to the
// exception the API throws.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <stdexcept>
#include <string>

namespace ap {

// Note [errors as codes]: decisions (recovery, which std exception a runner throws) read the code, never the
// text, so a message can be reworded freely.
enum class error_code : std::uint8_t {
  none,      
  lost_node,   // a node's process died, was killed, or stopped answering heartbeats
  timeout,     // a peer sent nothing within the timeout
  bad_input,   // std::invalid_argument
  diverged,    // a loss is not finite
  collective,  // a peer's failure seen through a group
  lost_peer,   // a peer's connection lost, seen through a group: recovery replays
  broken,      // stages may disagree: rebuild from a checkpoint
  internal,    // anything else: an actor that stopped, an exception without a code
  count
};

inline constexpr const char* error_code_names[] = {
    "none", "lost_node", "timeout", "bad_input", "diverged", "collective", "lost_peer", "broken", "internal",
};
static_assert(std::size(error_code_names) == static_cast<std::size_t>(error_code::count),
              "error_code_names needs one name per error_code");

inline const char* error_code_name(error_code code) {
  const auto i = static_cast<std::size_t>(code);
  return i < std::size(error_code_names) ? error_code_names[i] : "unknown";
}

// The code an exception carries: its own (ap::error), else by its std type, else internal.
class error {
 public:
  explicit error(error_code code) : code_(code) {}
  virtual ~error() = default;
  error_code code() const { return code_; }

 private:
  error_code code_;
};

// The exceptions the runners throw: the std types callers catch, each carrying its code.
class input_error : public std::invalid_argument, public error {
 public:
  explicit input_error(const std::string& what) : std::invalid_argument(what), error(error_code::bad_input) {}
};
class diverged_error : public std::domain_error, public error {
 public:
  explicit diverged_error(const std::string& what) : std::domain_error(what), error(error_code::diverged) {}
};
class runtime_failure : public std::runtime_error, public error {
 public:
  runtime_failure(error_code code, const std::string& what) : std::runtime_error(what), error(code) {}
};

inline error_code code_of(const std::exception& e) {
  if (const auto* coded = dynamic_cast<const error*>(&e)) return coded->code();
  if (dynamic_cast<const std::invalid_argument*>(&e)) return error_code::bad_input;
  if (dynamic_cast<const std::domain_error*>(&e)) return error_code::diverged;
  return error_code::internal;
}

// bad_input as std::invalid_argument, diverged as std::domain_error, else std::runtime_error; with the code.
[[noreturn]] inline void throw_error(error_code code, const std::string& what) {
  if (code == error_code::bad_input) throw input_error(what);
  if (code == error_code::diverged) throw diverged_error(what);
  throw runtime_failure(code, what);
}

// A failed step: std::domain_error when diverged, else std::runtime_error (even for bad input), with its code.
[[noreturn]] inline void throw_step_error(error_code code, const std::string& what) {
  if (code == error_code::diverged) throw diverged_error(what);
  throw runtime_failure(code, what);
}

}  // namespace ap

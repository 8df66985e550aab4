#include "collective/process_group.hpp"

#include <array>

namespace ap {

const char* reduce_op_name(reduce_op op) { return op == reduce_op::sum ? "sum" : "mean"; }

namespace {

constexpr std::array<const char*, collective_kinds> collective_kind_names{"all_reduce", "reduce_scatter", "all_gather",
                                                                          "broadcast"};
static_assert(static_cast<std::size_t>(collective_kind::broadcast) == collective_kinds,
              "every collective_kind has its name in collective_kind_names, in order");

}  // namespace

const char* collective_kind_name(collective_kind kind) {
  const auto k = static_cast<std::size_t>(kind);
  return k >= 1 && k <= collective_kinds ? collective_kind_names[k - 1] : "an unknown collective";
}

failure failure_of(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return failure{code_of(e), e.what()};
  } catch (...) {
    return failure{error_code::internal, "an exception that is not a std::exception"};
  }
}

int first_cause(const std::vector<std::exception_ptr>& errors) {
  int first = -1, lost_peer = -1;
  for (std::size_t i = 0; i < errors.size(); ++i) {
    if (!errors[i]) continue;
    const error_code code = failure_of(errors[i]).code;
    if (code != error_code::collective && code != error_code::lost_peer) return static_cast<int>(i);
    if (first < 0) first = static_cast<int>(i);
    if (code == error_code::lost_peer && lost_peer < 0) lost_peer = static_cast<int>(i);
  }
  return lost_peer >= 0 ? lost_peer : first;
}

}  // namespace ap

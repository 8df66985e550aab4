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

int first_cause(const std::vector<std::exception_ptr>& errors) {
  int first = -1;
  for (std::size_t i = 0; i < errors.size(); ++i) {
    if (!errors[i]) continue;
    try {
      std::rethrow_exception(errors[i]);
    } catch (const collective_error&) {
      if (first < 0) first = static_cast<int>(i);
    } catch (...) {
      return static_cast<int>(i);
    }
  }
  return first;
}

void rethrow_with(const std::exception_ptr& error, const std::string& suffix) {
  try {
    std::rethrow_exception(error);
  } catch (const collective_error& e) {
    throw collective_error(e.what() + suffix);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(e.what() + suffix);
  } catch (const std::domain_error& e) {
    throw std::domain_error(e.what() + suffix);
  } catch (const std::exception& e) {
    throw std::runtime_error(e.what() + suffix);
  }
}

}  // namespace ap

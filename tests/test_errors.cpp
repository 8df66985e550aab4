// Errors are values with a code (Note [errors as codes]): the decisions read the code, never the text, so a
// failure reworded in any way is still recovered from, and one that merely uses the old words is not.
#include <doctest/doctest.h>

#include <set>
#include <stdexcept>
#include <string>

#include "actors/pipeline.hpp"
#include "actors/recovery.hpp"
#include "collective/process_group.hpp"
#include "failure/error.hpp"
#include "network/error_text.hpp"

using namespace ap;

TEST_CASE("every error code has its own name") {
  std::set<std::string> names;
  for (std::size_t i = 0; i < static_cast<std::size_t>(error_code::count); ++i)
    names.insert(error_code_name(static_cast<error_code>(i)));
  CHECK(names.size() == static_cast<std::size_t>(error_code::count));
  CHECK(std::string(error_code_name(error_code::lost_node)) == "lost_node");
  CHECK(std::string(error_code_name(error_code::count)) == "unknown");
}

TEST_CASE("restart recovers a step that lost a node, whatever its text says") {
  CHECK(restart_recovers(failed_step(error_code::lost_node, "step 3: stage 1 on node 127.0.0.1:4242 is gone (lost "
                                                            "the connection: remote_link_unreachable)")));
  // Reworded: no phrase of the old text is left, the code still says a node was lost.
  CHECK(restart_recovers(failed_step(error_code::lost_node, "step 3: Knoten 127.0.0.1:4242 ist weg")));
  CHECK(restart_recovers(failed_step(error_code::lost_node, "")));
  CHECK(restart_recovers(failed_step(error_code::lost_peer, "group 'dp' all_reduce #0: rank 1 is gone")));
  // The old words with another code: not a lost node.
  for (error_code c : {error_code::timeout, error_code::bad_input, error_code::diverged, error_code::collective,
                       error_code::broken, error_code::internal})
    CHECK_MESSAGE(!restart_recovers(failed_step(c, "stage 1 on node 127.0.0.1:4242 is gone (lost the connection: x)")),
                  error_code_name(c));
  step_result ok;
  ok.ok = true;
  ok.code = error_code::lost_node;  // a successful step is never restarted
  CHECK(!restart_recovers(ok));
}

TEST_CASE("an exception's code: its own, else by its std type") {
  CHECK(code_of(collective_error("group 'dp' all_reduce #0: rank 1 aborted the group")) == error_code::collective);
  CHECK(code_of(pipeline_error("anything", error_code::lost_node)) == error_code::lost_node);
  CHECK(code_of(pipeline_error("anything")) == error_code::internal);
  CHECK(code_of(std::invalid_argument("label 9 out of range")) == error_code::bad_input);
  CHECK(code_of(std::domain_error("not finite")) == error_code::diverged);
  CHECK(code_of(std::runtime_error("step 0: looks like a loss")) == error_code::internal);
  CHECK(code_of(runtime_failure(error_code::timeout, "")) == error_code::timeout);
}

TEST_CASE("the exception type follows the code, and keeps it") {
  CHECK_THROWS_AS(throw_error(error_code::bad_input, "x"), std::invalid_argument);
  CHECK_THROWS_AS(throw_error(error_code::diverged, "x"), std::domain_error);
  CHECK_THROWS_AS(throw_error(error_code::timeout, "x"), std::runtime_error);
  // A step that failed while it ran: std::domain_error only when it diverged, whatever the text starts with.
  CHECK_THROWS_AS(throw_step_error(error_code::diverged, "the loss became NaN"), std::domain_error);
  CHECK_THROWS_AS(throw_step_error(error_code::bad_input, "step 0: label 9"), std::runtime_error);
  CHECK_THROWS_AS(throw_step_error(error_code::internal, "step 0: not finite"), std::runtime_error);
  try {
    throw_step_error(error_code::collective, "seen through the group");
  } catch (const error& e) {
    CHECK(e.code() == error_code::collective);
  }
}

TEST_CASE("a coded caf::error keeps its code and its text across actors") {
  const caf::error e = coded_error(error_code::collective, "group 'dp' rank 0: rank 1 aborted");
  CHECK(code_in(e) == error_code::collective);
  CHECK(error_text(e) == "group 'dp' rank 0: rank 1 aborted");
  CHECK(code_in(caf::make_error(caf::sec::runtime_error, std::string("plain"))) == error_code::internal);
  CHECK(code_in(caf::error{}) == error_code::internal);
  // Printed without its code, as the plain runtime_error it carries.
  CHECK(coded_error_string(e) == caf::to_string(caf::make_error(caf::sec::runtime_error,
                                                                 std::string("group 'dp' rank 0: rank 1 aborted"))));
}

// Shared state that threads use without CAF: the event log every stage's actors record into, with its streaming
// sinks, and the layer-kind registry. Plain std::threads, so ThreadSanitizer checks them (scripts/sanitize.sh).
#include <doctest/doctest.h>

#include <atomic>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/layer_registry.hpp"
#include "stage/event_log.hpp"
#include "test_support.hpp"

using namespace ap;

TEST_CASE("threads recording into one event log: every event reaches the sinks, busy sums per stage, readers meanwhile") {
  constexpr int stages = 4, tasks = 200;
  std::ostringstream trace;
  chrome_trace_writer writer(trace, stages);
  stage_log_renderer renderer;
  int streamed = 0, empty_lines = 0;  // the sink runs under the log's lock: no atomics needed
  event_log log(true, [&](const stage_event& e) {
    ++streamed;
    writer.add(e);
    empty_lines += renderer.line(e).empty();
  });
  std::atomic<bool> done{false};
  bool reads_ok = true;
  std::thread reader([&] {  // a progress report reading while stages record
    while (!done)
      reads_ok = reads_ok && log.busy_us(stages).size() == std::size_t{stages} && log.event_count() <= 3u * stages * tasks;
  });
  std::vector<std::thread> recorders;
  for (int s = 0; s < stages; ++s)
    recorders.emplace_back([&log, s] {
      for (int mb = 0; mb < tasks; ++mb) {
        log.record(s, event_kind::arrive, op::forward, 0, mb, 0);
        log.record(s, event_kind::start, op::forward, 0, mb, 0);
        log.record(s, event_kind::finish, op::forward, 0, mb, 0);
      }
    });
  for (auto& t : recorders) t.join();
  done = true;
  reader.join();
  writer.finish();
  CHECK(reads_ok);

  CHECK(streamed == 3 * stages * tasks);
  CHECK(empty_lines == 0);
  const auto events = log.events();
  REQUIRE(events.size() == 3u * stages * tasks);
  const auto busy = log.busy_us(stages);
  CHECK(busy == busy_time_us(events, stages));  // the running sums agree with the kept events
  for (int s = 0; s < stages; ++s) {
    int finished = 0;
    for (const auto& e : events) finished += e.stage == s && e.kind == event_kind::finish;
    CHECK(finished == tasks);
  }
  CHECK(nlohmann::json::parse(trace.str())["traceEvents"].size() > static_cast<std::size_t>(stages * tasks));
}

TEST_CASE("layer kinds registered by one thread while others build layers") {
  constexpr int kinds = 20;
  std::atomic<bool> done{false};
  std::atomic<int> wrong{0};
  std::vector<std::thread> builders;
  for (int b = 0; b < 2; ++b)
    builders.emplace_back([&] {
      while (!done)
        if (make_layer("relu")->spec() != "relu" || registered_layer_kinds().empty()) ++wrong;
    });
  for (int k = 0; k < kinds; ++k)
    register_layer_kind("threads_kind_" + std::to_string(k), [](const layer_spec&) { return make_layer("tanh"); });
  done = true;
  for (auto& t : builders) t.join();
  CHECK(wrong == 0);
  for (int k = 0; k < kinds; ++k) CHECK(make_layer("threads_kind_" + std::to_string(k))->spec() == "tanh");
}

// What the stages did, checked from recorded events: the stage log's walkthrough, one task at a time, the trace.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <map>
#include <sstream>
#include <tuple>

#include <nlohmann/json.hpp>

#include "actors/pipeline.hpp"
#include "pipeline_test_models.hpp"

using namespace ap;

namespace {

std::vector<std::string> lines_of_stage(const std::vector<std::string>& log, int stage) {
  const std::string prefix = "Stage " + std::to_string(stage) + ": ";
  std::vector<std::string> out;
  for (const auto& l : log)
    if (l.rfind(prefix, 0) == 0) out.push_back(l.substr(prefix.size()));
  return out;
}

// Runs one step of the nine-layer model, or of `sleeps` copies of a sleep layer spec when given.
std::vector<stage_event> run_recorded(const std::string& schedule_name, int stages, int microbatches,
                                      const std::string& sleep_spec = "") {
  pipeline_options o = test::pipeline_options_for(stages, microbatches, schedule_name);
  o.record_events = true;
  const dataset d = test::small_blobs(32);
  sequential model = test::nine_layer_model();
  if (!sleep_spec.empty()) {
    model = sequential{};
    for (int i = 0; i < stages; ++i) model.add(make_layer(sleep_spec));
  }
  pipeline pipe(model, o);
  pipe.train_step(d.inputs, d.labels, 0);
  return pipe.events();
}

}  // namespace

TEST_CASE("the stage log's walkthrough: 4 stages, 4 microbatches") {
  const auto events = run_recorded("gpipe", 4, 4);
  const auto log = render_stage_log(events);
  const auto stage1 = lines_of_stage(log, 1);
  REQUIRE(stage1.size() >= 6);
  // The coordinator enqueues the 4 microbatches into stage 1's queue, then stage 1 starts on microbatch 1.
  CHECK(stage1[3] == "Current task: empty, Current Queue: Forward microbatch 1,2,3,4");
  CHECK(stage1[4] == "Current task: Forward microbatch 1, Current Queue: Forward microbatch 2,3,4");
  CHECK(stage1[5] == "Current task: empty, Current Queue: Forward microbatch 2,3,4");
  // Stage 2's first state: stage 1's result for microbatch 1 waits in its queue; then it forwards it.
  const auto stage2 = lines_of_stage(log, 2);
  REQUIRE(stage2.size() >= 2);
  CHECK(stage2[0] == "Current task: empty, Current Queue: Forward microbatch 1");
  // Its first task is microbatch 1 (microbatch 2 may already be queued behind it: stage 1 is fast here).
  const auto first_task = std::find_if(stage2.begin(), stage2.end(), [](const std::string& l) {
    return l.rfind("Current task: empty", 0) != 0;
  });
  REQUIRE(first_task != stage2.end());
  CHECK(first_task->rfind("Current task: Forward microbatch 1, Current Queue: ", 0) == 0);
  // Every stage forwards microbatches 1..4 in order, then runs the backwards.
  for (int s = 1; s <= 4; ++s) {
    std::vector<std::string> started;
    for (const auto& l : lines_of_stage(log, s)) {
      const auto comma = l.find(',');
      const std::string current = l.substr(0, comma);
      if (current != "Current task: empty" && (started.empty() || started.back() != current)) started.push_back(current);
    }
    INFO("stage " << s);
    REQUIRE(started.size() == 8);
    for (int mb = 1; mb <= 4; ++mb) {
      CHECK(started[mb - 1] == "Current task: Forward microbatch " + std::to_string(mb));
      CHECK(started[mb + 3] == "Current task: Backward microbatch " + std::to_string(mb));
    }
  }
}

TEST_CASE("a stage runs one task at a time, in its schedule's order, early tasks wait in the queue") {
  int waited = 0;  // tasks that arrived while their stage was busy, over all schedules
  for (const std::string sched : {"gpipe", "1f1b", "zb-h1"}) {
    const int p = 3, m = 6;
    // Layers that take 3 ms forward and 6 ms backward: results arrive while the next stage is busy, even on a
    // loaded machine.
    const auto events = run_recorded(sched, p, m, "sleep:3:6");
    const schedule plan = make_schedule(sched, p, m);
    for (int s = 0; s < p; ++s) {
      INFO(sched << " stage " << s);
      constexpr std::size_t idle = SIZE_MAX;  // (not std::optional: GCC 12 at -O3 warns it may be read unset)
      std::size_t running = idle;  // index of the start event of the running task, or idle
      std::vector<action> ran;
      std::map<std::size_t, std::size_t> finish_of;                          // start index -> finish index
      std::vector<std::pair<std::tuple<bool, int, int>, std::size_t>> waits;  // (task, running start index)
      for (std::size_t i = 0; i < events.size(); ++i) {
        const auto& e = events[i];
        if (e.stage != s) continue;
        const auto key = std::make_tuple(e.task == op::forward, e.microbatch, e.chunk);
        if (e.kind == event_kind::start) {
          CHECK(running == idle);  // never two tasks at once
          for (const auto& [task, blocker] : waits)
            if (task == key && e.task != op::backward_weight) CHECK(finish_of.count(blocker) == 1);
          running = i;
          ran.push_back(action{s, e.task, e.microbatch, e.chunk});
        } else if (e.kind == event_kind::finish) {
          REQUIRE(running != idle);
          finish_of[running] = i;
          running = idle;
        } else if (running != idle) {
          ++waited;
          waits.push_back({key, running});
        }
      }
      CHECK(running == idle);
      CHECK(ran == plan.per_stage[static_cast<std::size_t>(s)]);
    }
  }
  CHECK(waited > 0);
}

TEST_CASE("the Chrome trace has a track per stage and a span per task") {
  const auto events = run_recorded("1f1b", 2, 4);
  const auto trace = nlohmann::json::parse(chrome_trace(events, 2));
  int spans = 0, names = 0, counters = 0;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] == "X") {
      ++spans;
      CHECK(e["dur"].get<double>() >= 0.0);
      CHECK(e["args"].contains("microbatch"));
    }
    names += e["ph"] == "M";
    counters += e["ph"] == "C";
  }
  CHECK(spans == 2 * 2 * 4);  // 2 stages x (F + B) x 4 microbatches
  CHECK(names == 2);
  CHECK(counters > 0);
}

// A long run must not keep an event per task unless asked (Note [bounded event log]).
TEST_CASE("without record_events the pipeline sums busy time and holds no events") {
  pipeline_options o = test::pipeline_options_for(2, 4, "1f1b");
  std::atomic<int> streamed{0};  // the sink sees every event although none is kept
  o.on_event = [&streamed](const stage_event&) { ++streamed; };
  const dataset d = test::small_blobs(32);
  pipeline pipe(test::nine_layer_model(), o);
  for (std::uint64_t step = 0; step < 20; ++step) pipe.train_step(d.inputs, d.labels, step);
  CHECK(pipe.held_events() == 0);
  CHECK(pipe.events().empty());
  CHECK(streamed.load() == 20 * 2 * 4 * 3 * 2);  // steps x stages x microbatches x (F, B: arrive, start, finish)
  const auto busy = pipe.busy_seconds();
  REQUIRE(busy.size() == 2);
  CHECK(busy[0] > 0.0);
  CHECK(busy[1] > 0.0);
  pipe.clear_events();
  CHECK(pipe.busy_seconds() == std::vector<double>{0.0, 0.0});
}

TEST_CASE("the busy sums equal the busy time of the kept events") {
  pipeline_options o = test::pipeline_options_for(2, 4, "gpipe");
  o.record_events = true;
  const dataset d = test::small_blobs(32);
  pipeline pipe(test::nine_layer_model(), o);
  for (std::uint64_t step = 0; step < 3; ++step) pipe.train_step(d.inputs, d.labels, step);
  CHECK(pipe.held_events() == pipe.events().size());
  const auto from_events = busy_time_us(pipe.events(), 2);
  const auto sums = pipe.busy_seconds();
  for (std::size_t s = 0; s < 2; ++s) CHECK(sums[s] == doctest::Approx(from_events[s] / 1e6).epsilon(1e-9));
}

TEST_CASE("the stage log rendered one event at a time matches the whole log, a finished trace ignores later events") {
  const auto events = run_recorded("1f1b", 2, 4);
  stage_log_renderer renderer;
  std::vector<std::string> streamed;
  for (const auto& e : events) streamed.push_back(renderer.line(e));
  CHECK(streamed == render_stage_log(events));
  std::ostringstream out;
  chrome_trace_writer writer(out, 2);
  const std::size_t half = events.size() / 2;
  for (std::size_t i = 0; i < half; ++i) writer.add(events[i]);
  writer.finish();
  for (std::size_t i = half; i < events.size(); ++i) writer.add(events[i]);  // after finish: dropped
  const auto trace = nlohmann::json::parse(out.str());  // closed JSON, nothing after it
  const auto whole = nlohmann::json::parse(chrome_trace(events, 2));
  CHECK(trace["traceEvents"].size() > 2);
  CHECK(trace["traceEvents"].size() < whole["traceEvents"].size());
}

TEST_CASE("--stage-log's snapshots: every stage after each change, numbered from 1, arrivals shown together, a step separator") {
  stage_log_snapshots log(2);
  std::string text;
  std::uint64_t step = 0;
  const auto add = [&](int stage, event_kind k, op o, int mb) { text += log.add(stage_event{0, stage, k, o, step, mb, stage}); };
  for (int mb = 0; mb < 3; ++mb) add(0, event_kind::arrive, op::forward, mb);  // the coordinator enqueues all three
  CHECK(text == "=== Step 1 (step 0 in errors and traces) ===\n");
  add(0, event_kind::start, op::forward, 0);
  CHECK(text == "=== Step 1 (step 0 in errors and traces) ===\n"
                "Stage 1: Current task: empty, Current Queue: Forward microbatch 1,2,3\n"
                "Stage 2: Current task: empty, Current Queue: empty\n\n"
                "Stage 1: Current task: Forward microbatch 1, Current Queue: Forward microbatch 2,3\n"
                "Stage 2: Current task: empty, Current Queue: empty\n\n");
  text.clear();
  add(0, event_kind::finish, op::forward, 0);
  add(1, event_kind::arrive, op::forward, 0);
  add(0, event_kind::start, op::forward, 1);
  CHECK(text == "Stage 1: Current task: empty, Current Queue: Forward microbatch 2,3\n"
                "Stage 2: Current task: empty, Current Queue: empty\n\n"
                "Stage 1: Current task: empty, Current Queue: Forward microbatch 2,3\n"
                "Stage 2: Current task: empty, Current Queue: Forward microbatch 1\n\n"
                "Stage 1: Current task: Forward microbatch 2, Current Queue: Forward microbatch 3\n"
                "Stage 2: Current task: empty, Current Queue: Forward microbatch 1\n\n");
  // A new step starts from empty queues under its separator.
  text.clear();
  step = 1;
  add(1, event_kind::arrive, op::backward, all_microbatches);
  add(1, event_kind::start, op::backward, all_microbatches);
  CHECK(text == "=== Step 2 (step 1 in errors and traces) ===\n"
                "Stage 1: Current task: empty, Current Queue: empty\n"
                "Stage 2: Current task: empty, Current Queue: Backward whole batch\n\n"
                "Stage 1: Current task: empty, Current Queue: empty\n"
                "Stage 2: Current task: Backward whole batch, Current Queue: empty\n\n");
}

TEST_CASE("the stage log streams while a step runs, and sync-backward shows one whole-batch backward per stage") {
  std::vector<std::string> printed;
  std::atomic<bool> step_returned{false};
  bool printed_before_return = false;
  pipeline_options o = test::pipeline_options_for(3, 4, "sync-backward");
  auto log = std::make_shared<stage_log_snapshots>(3);
  o.on_event = [&, log](const stage_event& e) {
    const std::string text = log->add(e);
    if (!text.empty()) printed.push_back(text);
    if (!step_returned) printed_before_return = true;
  };
  pipeline pipe(test::nine_layer_model(), o);
  const dataset d = test::small_blobs(16);
  pipe.train_step(d.inputs, d.labels, 0);
  step_returned = true;
  CHECK(printed_before_return);
  std::string all;
  for (const auto& t : printed) all += t;
  CHECK(all.rfind("=== Step 1 (step 0 in errors and traces) ===\n", 0) == 0);
  for (int s = 1; s <= 3; ++s) {
    INFO("stage " << s);
    CHECK(all.find("Stage " + std::to_string(s) + ": Current task: Backward whole batch, ") != std::string::npos);
    CHECK(all.find("Stage " + std::to_string(s) + ": Current task: Backward microbatch") == std::string::npos);
  }
}

// What the stages did, as events, rendered as the stage log or a Chrome trace.
// Note [bounded event log]: a run of many steps must not grow: the log sums each stage's busy time as events come,
// keeps the events only when asked, and hands each to a sink, so the stage log and trace stream while training.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "schedule/schedule.hpp"

namespace ap {

enum class event_kind { arrive, start, finish };

struct stage_event {
  double time_us = 0.0;  // since the log was created
  int stage = 0;
  event_kind kind = event_kind::arrive;
  op task = op::forward;  // for arrive: forward or backward (the message kind)
  std::uint64_t step = 0;
  int microbatch = 0, chunk = 0;
};

// Thread-safe: every stage's retriever and processor record into one log.
class event_log {
 public:
  using sink = std::function<void(const stage_event&)>;  // called under the log's lock, in record order

  explicit event_log(bool keep_events = true, sink on_event = {})
      : start_(std::chrono::steady_clock::now()), keep_(keep_events), sink_(std::move(on_event)) {}
  void record(int stage, event_kind kind, op task, std::uint64_t step, int microbatch, int chunk);
  std::vector<stage_event> events() const;  // empty unless keep_events
  std::size_t event_count() const;          // events held now
  // Busy microseconds per stage since creation or the last clear, kept whether events are or not.
  std::vector<double> busy_us(int stages) const;
  void clear();  // drops the events and the busy sums
  // A node's stage keeps its step's events and sends them with stage_done; drain() hands them over. The
  // coordinator's log takes them with ingest(), times already in its own clock (Note [events from nodes]).
  std::vector<stage_event> drain();
  void ingest(const stage_event& e);
  // This log's creation on the steady clock, in microseconds (time_us + epoch_us() compares across logs).
  double epoch_us() const;

 private:
  mutable std::mutex mutex_;
  std::chrono::steady_clock::time_point start_;
  bool keep_;
  sink sink_;
  std::vector<stage_event> events_;
  std::vector<double> busy_, started_;  // per stage; started_ < 0: no task running
};

// The stage log one event at a time: keeps only each stage's queue and current task.
class stage_log_renderer {
 public:
  explicit stage_log_renderer(int chunks_per_stage = 1) : name_chunk_(chunks_per_stage > 1) {}
  std::string line(const stage_event& e);  // the state of e's stage after e
  void apply(const stage_event& e);        // updates e's stage, printing nothing
  std::string state_line(int stage) const; // "Stage 2: Current task: ..., Current Queue: ..." (stage from 0)
  void reset();                            // every stage idle with an empty queue (a new step)

 private:
  struct queued {
    op kind;
    int microbatch, chunk;
  };
  std::string queue_words(const std::vector<queued>& q) const;
  bool name_chunk_;
  std::map<int, std::vector<queued>> queues_;
  std::map<int, std::optional<queued>> current_;
};

// Note [seed's walkthrough]: --stage-log prints, after each change, the state of every stage ("Stage 1: Current
// task: Forward microbatch 2, Current Queue: Forward microbatch 3,4", counted from 1), one block per change, with
// "=== Step 1 (step 0 in errors and traces) ===" before a step's first block. It streams while training runs.
class stage_log_snapshots {
 public:
  explicit stage_log_snapshots(int stages, int chunks_per_stage = 1) : stages_(stages), renderer_(chunks_per_stage) {}
  std::string add(const stage_event& e);  // the text to print now (may be empty), each line ending in '\n'

 private:
  std::string snapshot() const;
  int stages_;
  stage_log_renderer renderer_;
  std::optional<std::uint64_t> step_;  // of the last event; none before the first
  bool arrivals_unshown_ = false;
};

// One line per event: the state of its stage after it, in words (counted from 1; chunks named when several).
std::vector<std::string> render_stage_log(const std::vector<stage_event>& events, int chunks_per_stage = 1);

// The Chrome trace written as events come. finish() (or the destructor) closes the JSON; the stream must outlive
// the writer.
class chrome_trace_writer {
 public:
  chrome_trace_writer(std::ostream& out, int stages);
  ~chrome_trace_writer();
  chrome_trace_writer(const chrome_trace_writer&) = delete;
  chrome_trace_writer& operator=(const chrome_trace_writer&) = delete;
  void add(const stage_event& e);
  void finish();

 private:
  void put(const std::string& entry);
  std::ostream& out_;
  int stages_;
  bool first_ = true, finished_ = false;
  std::vector<int> queue_length_;
  std::vector<std::optional<stage_event>> open_;
};

// Chrome trace JSON (chrome://tracing, Perfetto): a track per stage, a span per task, queue lengths.
std::string chrome_trace(const std::vector<stage_event>& events, int stages);

// Busy microseconds per stage, from kept events.
std::vector<double> busy_time_us(const std::vector<stage_event>& events, int stages);

}  // namespace ap

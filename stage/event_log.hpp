// What the stages did, as events: recorded while running, then rendered as the seed's stage log
// ("Stage 1: Current task: Forward microbatch 2, Current Queue: Forward microbatch 3,4") or a Chrome trace.
#pragma once

#include <chrono>
#include <mutex>
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
  int step = 0, microbatch = 0, chunk = 0;
};

// Thread-safe: the retriever and processor of every stage record into one log.
class event_log {
 public:
  event_log() : start_(std::chrono::steady_clock::now()) {}
  void record(int stage, event_kind kind, op task, int step, int microbatch, int chunk);
  std::vector<stage_event> events() const;
  void clear();

 private:
  mutable std::mutex mutex_;
  std::chrono::steady_clock::time_point start_;
  std::vector<stage_event> events_;
};

// One line per event: the state of the event's stage after it, in the seed's words. Stages and
// microbatches are numbered from 1 as in the seed's example; with several chunks per stage the chunk is named.
std::vector<std::string> render_stage_log(const std::vector<stage_event>& events, int chunks_per_stage = 1);

// Chrome trace JSON (chrome://tracing, Perfetto): one track per stage, a span per task, queue lengths.
std::string chrome_trace(const std::vector<stage_event>& events, int stages);

// Busy time per stage (sum of start..finish spans), in microseconds.
std::vector<double> busy_time_us(const std::vector<stage_event>& events, int stages);

}  // namespace ap

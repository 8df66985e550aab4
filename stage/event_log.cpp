#include "stage/event_log.hpp"

#include <algorithm>
#include <map>
#include <optional>

#include <nlohmann/json.hpp>

namespace ap {

void event_log::record(int stage, event_kind kind, op task, int step, int microbatch, int chunk) {
  const double t = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start_).count();
  std::lock_guard<std::mutex> lock(mutex_);
  events_.push_back(stage_event{t, stage, kind, task, step, microbatch, chunk});
}

std::vector<stage_event> event_log::events() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return events_;
}

void event_log::clear() {
  std::lock_guard<std::mutex> lock(mutex_);
  events_.clear();
}

namespace {

// The message kind an action consumes: I and B both consume a backward_task.
op arrival_kind(op o) { return o == op::forward ? op::forward : op::backward; }

struct queued {
  op kind;
  int microbatch, chunk;
};

std::string task_words(op kind, int chunk, bool name_chunk) {
  std::string s = name_of(kind).title;
  if (name_chunk) s += " chunk " + std::to_string(chunk);
  return s + " microbatch ";
}

std::string queue_words(const std::vector<queued>& q, bool name_chunk) {
  if (q.empty()) return "empty";
  std::string out;
  for (std::size_t i = 0; i < q.size(); ++i) {
    const bool same_group = i > 0 && q[i].kind == q[i - 1].kind && q[i].chunk == q[i - 1].chunk;
    if (same_group) {
      out += ",";
    } else {
      if (i > 0) out += ", ";
      out += task_words(q[i].kind, q[i].chunk, name_chunk);
    }
    out += std::to_string(q[i].microbatch + 1);
  }
  return out;
}

}  // namespace

std::vector<std::string> render_stage_log(const std::vector<stage_event>& events, int chunks_per_stage) {
  const bool name_chunk = chunks_per_stage > 1;
  std::map<int, std::vector<queued>> queues;
  std::map<int, std::optional<queued>> current;
  std::vector<std::string> lines;
  for (const auto& e : events) {
    auto& q = queues[e.stage];
    auto& cur = current[e.stage];
    if (e.kind == event_kind::arrive) {
      q.push_back({e.task, e.microbatch, e.chunk});
    } else if (e.kind == event_kind::start) {
      const op k = arrival_kind(e.task);
      auto it = std::find_if(q.begin(), q.end(), [&](const queued& x) {
        return x.kind == k && x.microbatch == e.microbatch && x.chunk == e.chunk;
      });
      if (it != q.end() && e.task != op::backward_weight) q.erase(it);
      cur = queued{e.task, e.microbatch, e.chunk};
    } else {
      cur.reset();
    }
    std::string line = "Stage " + std::to_string(e.stage + 1) + ": Current task: ";
    line += cur ? task_words(cur->kind, cur->chunk, name_chunk) + std::to_string(cur->microbatch + 1) : "empty";
    line += ", Current Queue: " + queue_words(q, name_chunk);
    lines.push_back(std::move(line));
  }
  return lines;
}

std::vector<double> busy_time_us(const std::vector<stage_event>& events, int stages) {
  std::vector<double> busy(static_cast<std::size_t>(stages), 0.0);
  std::vector<double> started(static_cast<std::size_t>(stages), -1.0);
  for (const auto& e : events) {
    if (e.stage < 0 || e.stage >= stages) continue;
    auto s = static_cast<std::size_t>(e.stage);
    if (e.kind == event_kind::start) started[s] = e.time_us;
    if (e.kind == event_kind::finish && started[s] >= 0) busy[s] += e.time_us - started[s], started[s] = -1.0;
  }
  return busy;
}

std::string chrome_trace(const std::vector<stage_event>& events, int stages) {
  using nlohmann::json;
  json trace = json::array();
  for (int s = 0; s < stages; ++s)
    trace.push_back({{"ph", "M"}, {"name", "thread_name"}, {"pid", 0}, {"tid", s},
                     {"args", {{"name", "stage " + std::to_string(s)}}}});
  std::vector<int> queue_length(static_cast<std::size_t>(stages), 0);
  std::vector<const stage_event*> open(static_cast<std::size_t>(stages), nullptr);
  for (const auto& e : events) {
    if (e.stage < 0 || e.stage >= stages) continue;
    const auto s = static_cast<std::size_t>(e.stage);
    if (e.kind == event_kind::arrive || (e.kind == event_kind::start && e.task != op::backward_weight)) {
      queue_length[s] += e.kind == event_kind::arrive ? 1 : -1;
      trace.push_back({{"ph", "C"}, {"name", "queue stage " + std::to_string(s)}, {"pid", 0}, {"ts", e.time_us},
                       {"args", {{"length", queue_length[s]}}}});
    }
    if (e.kind == event_kind::start) open[s] = &e;
    if (e.kind == event_kind::finish && open[s]) {
      const stage_event& b = *open[s];
      const std::string name = std::to_string(b.chunk) + op_letter(b.task) +
                               std::to_string(b.microbatch);
      trace.push_back({{"ph", "X"}, {"name", name}, {"cat", name_of(b.task).title}, {"pid", 0}, {"tid", e.stage},
                       {"ts", b.time_us}, {"dur", e.time_us - b.time_us},
                       {"args", {{"step", b.step}, {"microbatch", b.microbatch}, {"chunk", b.chunk}}}});
      open[s] = nullptr;
    }
  }
  return json{{"traceEvents", trace}, {"displayTimeUnit", "ms"}}.dump();
}

}  // namespace ap

#include "stage/event_log.hpp"

#include <algorithm>
#include <sstream>

#include <nlohmann/json.hpp>

namespace ap {

void event_log::record(int stage, event_kind kind, op task, std::uint64_t step, int microbatch, int chunk) {
  const double t = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start_).count();
  ingest(stage_event{t, stage, kind, task, step, microbatch, chunk});
}

std::vector<stage_event> event_log::drain() {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<stage_event> out;
  out.swap(events_);
  return out;
}

double event_log::epoch_us() const {
  return std::chrono::duration<double, std::micro>(start_.time_since_epoch()).count();
}

void event_log::ingest(const stage_event& e) {
  const double t = e.time_us;
  const int stage = e.stage;
  const event_kind kind = e.kind;
  std::lock_guard<std::mutex> lock(mutex_);
  if (stage >= 0 && kind != event_kind::arrive) {  // one sum per stage (Note [bounded event log])
    const auto s = static_cast<std::size_t>(stage);
    if (s >= busy_.size()) busy_.resize(s + 1, 0.0), started_.resize(s + 1, -1.0);
    if (kind == event_kind::start) started_[s] = t;
    if (kind == event_kind::finish && started_[s] >= 0) busy_[s] += t - started_[s], started_[s] = -1.0;
  }
  if (keep_) events_.push_back(e);
  if (sink_) sink_(e);
}

std::vector<stage_event> event_log::events() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return events_;
}

std::size_t event_log::event_count() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return events_.size();
}

std::vector<double> event_log::busy_us(int stages) const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<double> busy(static_cast<std::size_t>(std::max(stages, 0)), 0.0);
  for (std::size_t s = 0; s < busy.size() && s < busy_.size(); ++s) busy[s] = busy_[s];
  return busy;
}

void event_log::clear() {
  std::lock_guard<std::mutex> lock(mutex_);
  events_.clear();
  events_.shrink_to_fit();
  std::fill(busy_.begin(), busy_.end(), 0.0);
  std::fill(started_.begin(), started_.end(), -1.0);
}

namespace {

// The message kind an action consumes: I and B both consume a backward_task.
op arrival_kind(op o) { return o == op::forward ? op::forward : op::backward; }

// "Forward microbatch " (the number follows), or "Backward whole batch" (Note [sync-backward]).
std::string task_words(op kind, int chunk, bool name_chunk, int microbatch = 0) {
  std::string s = name_of(kind).title;
  if (name_chunk) s += " chunk " + std::to_string(chunk);
  return s + (microbatch == all_microbatches ? " whole batch" : " microbatch ");
}

std::string number_of(int microbatch) {
  return microbatch == all_microbatches ? "" : std::to_string(microbatch + 1);  // the stage log counts from 1
}

}  // namespace

std::string stage_log_renderer::queue_words(const std::vector<queued>& q) const {
  if (q.empty()) return "empty";
  std::string out;
  for (std::size_t i = 0; i < q.size(); ++i) {
    const bool same_group = i > 0 && q[i].kind == q[i - 1].kind && q[i].chunk == q[i - 1].chunk &&
                            q[i].microbatch != all_microbatches && q[i - 1].microbatch != all_microbatches;
    if (same_group) {
      out += ",";
    } else {
      if (i > 0) out += ", ";
      out += task_words(q[i].kind, q[i].chunk, name_chunk_, q[i].microbatch);
    }
    out += number_of(q[i].microbatch);
  }
  return out;
}

void stage_log_renderer::apply(const stage_event& e) {
  auto& q = queues_[e.stage];
  auto& cur = current_[e.stage];
  if (e.kind == event_kind::arrive) {
    q.push_back({e.task, e.microbatch, e.chunk});
  } else if (e.kind == event_kind::start) {
    const op k = arrival_kind(e.task);
    auto it = std::find_if(q.begin(), q.end(), [&](const queued& x) {
      return x.kind == k && x.microbatch == e.microbatch && x.chunk == e.chunk;
    });
    if (it != q.end() && runs_on_arrival(e.task)) q.erase(it);
    cur = queued{e.task, e.microbatch, e.chunk};
  } else {
    cur.reset();
  }
}

std::string stage_log_renderer::state_line(int stage) const {
  static const std::vector<queued> empty_queue;
  const auto q = queues_.find(stage);
  const auto cur = current_.find(stage);
  const bool busy = cur != current_.end() && cur->second;
  std::string text = "Stage " + std::to_string(stage + 1) + ": Current task: ";
  text += busy ? task_words(cur->second->kind, cur->second->chunk, name_chunk_, cur->second->microbatch) +
                     number_of(cur->second->microbatch)
               : "empty";
  text += ", Current Queue: " + queue_words(q == queues_.end() ? empty_queue : q->second);
  return text;
}

void stage_log_renderer::reset() {
  queues_.clear();
  current_.clear();
}

std::string stage_log_renderer::line(const stage_event& e) {
  apply(e);
  return state_line(e.stage);
}

std::string stage_log_snapshots::snapshot() const {
  std::string out;
  for (int s = 0; s < stages_; ++s) out += renderer_.state_line(s) + "\n";
  return out + "\n";
}

std::string stage_log_snapshots::add(const stage_event& e) {
  std::string out;
  if (e.step != step_) {  // the step's first event; leftovers of an aborted step go (Note [seed's walkthrough])
    step_ = e.step;
    renderer_.reset();
    arrivals_unshown_ = false;
    out += "=== Step " + std::to_string(e.step + 1) + " (step " + std::to_string(e.step) + " in errors and traces) ===\n";
  }
  if (e.kind == event_kind::arrive) {
    renderer_.apply(e);
    arrivals_unshown_ = true;
    return out;
  }
  if (arrivals_unshown_) out += snapshot();
  arrivals_unshown_ = false;
  renderer_.apply(e);
  return out + snapshot();
}

std::vector<std::string> render_stage_log(const std::vector<stage_event>& events, int chunks_per_stage) {
  stage_log_renderer renderer(chunks_per_stage);
  std::vector<std::string> lines;
  for (const auto& e : events) lines.push_back(renderer.line(e));
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

chrome_trace_writer::chrome_trace_writer(std::ostream& out, int stages)
    : out_(out), stages_(stages), queue_length_(static_cast<std::size_t>(std::max(stages, 0)), 0),
      open_(static_cast<std::size_t>(std::max(stages, 0))) {
  using nlohmann::json;
  out_ << "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[";
  for (int s = 0; s < stages; ++s)
    put(json{{"ph", "M"}, {"name", "thread_name"}, {"pid", 0}, {"tid", s},
             {"args", {{"name", "stage " + std::to_string(s)}}}}.dump());
}

chrome_trace_writer::~chrome_trace_writer() { finish(); }

void chrome_trace_writer::put(const std::string& entry) {
  if (!first_) out_ << ",";
  out_ << "\n" << entry;
  first_ = false;
}

void chrome_trace_writer::add(const stage_event& e) {
  using nlohmann::json;
  if (finished_ || e.stage < 0 || e.stage >= stages_) return;
  const auto s = static_cast<std::size_t>(e.stage);
  if (e.kind == event_kind::arrive || (e.kind == event_kind::start && runs_on_arrival(e.task))) {
    queue_length_[s] += e.kind == event_kind::arrive ? 1 : -1;
    put(json{{"ph", "C"}, {"name", "queue stage " + std::to_string(s)}, {"pid", 0}, {"ts", e.time_us},
             {"args", {{"length", queue_length_[s]}}}}.dump());
  }
  if (e.kind == event_kind::start) open_[s] = e;
  if (e.kind == event_kind::finish && open_[s]) {
    const stage_event& b = *open_[s];
    const std::string name = to_string(action{b.stage, b.task, b.microbatch, b.chunk});
    put(json{{"ph", "X"}, {"name", name}, {"cat", name_of(b.task).title}, {"pid", 0}, {"tid", e.stage},
             {"ts", b.time_us}, {"dur", e.time_us - b.time_us},
             {"args", {{"step", b.step}, {"microbatch", b.microbatch}, {"chunk", b.chunk}}}}.dump());
    open_[s].reset();
  }
}

void chrome_trace_writer::finish() {
  if (finished_) return;
  finished_ = true;
  out_ << "\n]}\n";
  out_.flush();
}

std::string chrome_trace(const std::vector<stage_event>& events, int stages) {
  std::ostringstream out;
  {
    chrome_trace_writer writer(out, stages);
    for (const auto& e : events) writer.add(e);
  }
  return out.str();
}

}  // namespace ap

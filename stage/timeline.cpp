#include "stage/timeline.hpp"

#include <algorithm>
#include <array>
#include <cstdio>
#include <map>
#include <optional>
#include <tuple>

namespace ap {

namespace {

// When a (microbatch, chunk) reached a milestone in the step: its forward's end, its input gradient's end.
struct milestones {
  std::map<std::pair<int, int>, double> forward_done, input_grad_done;
};

std::optional<double> find(const std::map<std::pair<int, int>, double>& m, int microbatch, int chunk) {
  const auto it = m.find({microbatch, chunk});
  if (it == m.end()) return std::nullopt;
  return it->second;
}

// The end of whatever produced the task an arrival carries (Note [dependencies]); the last chunk's backward task
// comes through the coordinator's loss, and the first chunk's forward tasks have no producer.
std::optional<double> producer_end(const milestones& done, bool forward, int microbatch, int chunk, int chunks,
                                   int microbatches) {
  if (forward) return chunk > 0 ? find(done.forward_done, microbatch, chunk - 1) : std::nullopt;
  if (chunk + 1 < chunks) return find(done.input_grad_done, microbatch, chunk + 1);
  if (microbatch != all_microbatches) return find(done.forward_done, microbatch, chunk);
  std::optional<double> last;  // the whole batch's gradient leaves the coordinator after the last output
  for (int mb = 0; mb < microbatches; ++mb)
    if (auto t = find(done.forward_done, mb, chunk)) last = std::max(last.value_or(0.0), *t);
  return last;
}

std::string number(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", x);
  std::string s = buf;
  while (s.back() == '0') s.pop_back();
  if (s.back() == '.') s.pop_back();
  return s;
}


}  // namespace

measured_step measure_step(const std::vector<stage_event>& events, const schedule& plan) {
  measured_step m;
  if (events.empty()) return m;
  m.step = events.front().step;
  double t0 = events.front().time_us;
  for (const auto& e : events) t0 = std::min(t0, e.time_us);
  const auto seconds = [&](double us) { return (us - t0) / 1e6; };
  std::map<int, stage_event> open;  // per stage: the action running
  milestones done;
  for (const auto& e : events) {
    if (e.kind == event_kind::start) open[e.stage] = e;
    if (e.kind != event_kind::finish) continue;
    const auto it = open.find(e.stage);
    if (it == open.end()) continue;
    const stage_event& b = it->second;
    const action a{e.stage, b.task, b.microbatch, b.chunk};
    m.spans.push_back({e.stage, a, seconds(b.time_us), seconds(e.time_us)});
    m.busy += seconds(e.time_us) - seconds(b.time_us);
    m.makespan = std::max(m.makespan, seconds(e.time_us));
    if (a.kind == op::forward) done.forward_done[{a.microbatch, a.chunk}] = seconds(e.time_us);
    if (a.kind == op::backward || a.kind == op::backward_input) {
      if (a.microbatch == all_microbatches)
        for (int mb = 0; mb < plan.microbatches; ++mb) done.input_grad_done[{mb, a.chunk}] = seconds(e.time_us);
      done.input_grad_done[{a.microbatch, a.chunk}] = seconds(e.time_us);
    }
    open.erase(it);
  }
  for (const auto& e : events) {
    if (e.kind != event_kind::arrive) continue;
    const bool forward = e.task == op::forward;
    const auto sent = producer_end(done, forward, e.microbatch, e.chunk, plan.total_chunks(), plan.microbatches);
    if (!sent) continue;
    // An arrival may precede its producer's recorded finish by a hair.
    const double arrived = std::max(seconds(e.time_us), *sent);
    m.transfers.push_back({e.stage, action{e.stage, forward ? op::forward : op::backward, e.microbatch, e.chunk}, *sent, arrived});
  }
  return m;
}

op_costs measured_costs(const measured_step& m, const schedule& plan) {
  const auto p = static_cast<std::size_t>(plan.stages);
  std::vector<double> sum_f(p, 0), sum_b(p, 0), sum_i(p, 0), sum_w(p, 0);
  std::vector<int> n_f(p, 0), n_b(p, 0), n_i(p, 0), n_w(p, 0);
  for (const auto& s : m.spans) {
    const auto k = static_cast<std::size_t>(s.stage);
    if (k >= p) continue;
    const double d = s.end - s.start;
    switch (s.a.kind) {
      case op::forward: sum_f[k] += d, ++n_f[k]; break;
      case op::backward:  // a whole-batch B is m backwards' worth
        if (s.a.microbatch == all_microbatches) sum_b[k] += d, n_b[k] += plan.microbatches;
        else sum_b[k] += d, ++n_b[k];
        break;
      case op::backward_input: sum_i[k] += d, ++n_i[k]; break;
      case op::backward_weight: sum_w[k] += d, ++n_w[k]; break;
      case op::reduce_grad: break;  // starts a collective and returns: its cost is not the stage's
    }
  }
  const auto mean = [](double sum, int n) { return n > 0 ? sum / n : 0.0; };
  const double v = plan.chunks_per_stage;  // ap::simulate charges a chunk's action 1/v of its stage's cost
  op_costs c;
  for (std::size_t k = 0; k < p; ++k) {
    c.forward.push_back(v * mean(sum_f[k], n_f[k]));
    // A full B's cost is carried as I (simulate charges B = I + W).
    c.backward_input.push_back(v * (n_b[k] > 0 ? mean(sum_b[k], n_b[k]) : mean(sum_i[k], n_i[k])));
    c.backward_weight.push_back(v * (n_b[k] > 0 ? 0.0 : mean(sum_w[k], n_w[k])));
  }
  double transfer = 0.0;
  for (const auto& t : m.transfers) transfer += t.arrived - t.sent;
  c.transfer = m.transfers.empty() ? 0.0 : transfer / static_cast<double>(m.transfers.size());
  return c;
}

std::string timeline_svg(const schedule& plan, const measured_step& measured, const simulation& simulated) {
  constexpr double timeline_width = 960.0, label_width = 90.0, row_height = 26.0, header = 22.0;
  const double span_s = std::max({measured.makespan, simulated.makespan, 1e-9});
  const double scale = timeline_width / span_s;
  const int p = plan.stages;
  const double block = header + row_height * p + 10.0;  // one timeline: its title line and its rows
  const double height = 30.0 + 2 * block + 30.0;
  const double ideal = measured.busy / std::max(p, 1);
  const double measured_bubble = ideal > 0 ? measured.makespan / ideal - 1.0 : 0.0;
  std::string out = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + number(label_width + timeline_width + 20) +
                    "\" height=\"" + number(height) + "\" font-family=\"monospace\" font-size=\"11\">\n";
  out += "<title>" + plan.name + " step " + std::to_string(measured.step) + ": measured makespan " +
         number(measured.makespan * 1e3) + " ms, simulated " + number(simulated.makespan * 1e3) + " ms</title>\n";
  out += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  for (std::size_t k = 0; k < op_count; ++k)
    out += "<rect x=\"" + number(label_width + 60.0 * k) + "\" y=\"6\" width=\"12\" height=\"12\" fill=\"" +
           op_names[k].colour + "\"/><text x=\"" + number(label_width + 60.0 * k + 16) + "\" y=\"16\">" +
           op_names[k].letter + "</text>\n";
  out += "<line x1=\"" + number(label_width + 310) + "\" y1=\"12\" x2=\"" + number(label_width + 330) +
         "\" y2=\"12\" stroke=\"#cc0000\" stroke-width=\"2\"/><text x=\"" + number(label_width + 334) +
         "\" y=\"16\">transfer (sent .. arrived)</text>\n";
  const auto draw = [&](double top, const std::string& title, const std::vector<simulation::span>& spans,
                        const std::vector<measured_step::transfer>* transfers) {
    out += "<text x=\"4\" y=\"" + number(top + 14) + "\" font-weight=\"bold\">" + title + "</text>\n";
    for (int s = 0; s < p; ++s)
      out += "<text x=\"4\" y=\"" + number(top + header + row_height * s + row_height * 0.65) + "\">stage " +
             std::to_string(s) + "</text>\n";
    for (const auto& span : spans) {
      const double x = label_width + span.start * scale, w = std::max(1.0, (span.end - span.start) * scale);
      const bool lane = is_reduction(span.a);  // a thin bar under the compute (Note [gradient reduction])
      const double y = top + header + row_height * span.stage + (lane ? row_height - 11.0 : 2.0);
      const std::string label = to_string(span.a).substr(std::to_string(span.a.chunk).size());
      out += "<g><title>" + to_string(span.a) + " on stage " + std::to_string(span.stage) + ": " +
             number(span.start * 1e3) + " .. " + number(span.end * 1e3) + " ms</title><rect x=\"" + number(x) +
             "\" y=\"" + number(y) + "\" width=\"" + number(w) + "\" height=\"" + number(lane ? 4.0 : row_height - 8.0) +
             "\" fill=\"" + name_of(span.a.kind).colour + "\" stroke=\"#333\" stroke-width=\"0.5\"/>";
      if (!lane && w >= 7.0 * label.size())
        out += "<text x=\"" + number(x + w / 2) + "\" y=\"" + number(y + row_height * 0.5) +
               "\" text-anchor=\"middle\">" + label + "</text>";
      out += "</g>\n";
    }
    if (transfers)
      for (const auto& t : *transfers) {
        const double y = top + header + row_height * t.stage + row_height - 4.0;
        out += "<line x1=\"" + number(label_width + t.sent * scale) + "\" y1=\"" + number(y) + "\" x2=\"" +
               number(label_width + t.arrived * scale + 0.5) + "\" y2=\"" + number(y) +
               "\" stroke=\"#cc0000\" stroke-width=\"2\"><title>" + to_string(t.consumer) + " arrives on stage " +
               std::to_string(t.stage) + ": sent " + number(t.sent * 1e3) + " ms, arrived " + number(t.arrived * 1e3) +
               " ms</title></line>\n";
      }
  };
  draw(30.0, "measured, step " + std::to_string(measured.step) + ": makespan " + number(measured.makespan * 1e3) +
                 " ms, bubble " + number(100.0 * measured_bubble) + "% of ideal",
       measured.spans, &measured.transfers);
  draw(30.0 + block, "simulated with the measured per-action costs: makespan " + number(simulated.makespan * 1e3) +
                         " ms, bubble " + number(100.0 * simulated.bubble) + "% of ideal",
       simulated.spans, nullptr);
  const double axis_y = 30.0 + 2 * block;
  out += "<line x1=\"" + number(label_width) + "\" y1=\"" + number(axis_y) + "\" x2=\"" +
         number(label_width + timeline_width) + "\" y2=\"" + number(axis_y) + "\" stroke=\"black\"/>\n";
  for (int tick = 0; tick <= 10; ++tick) {
    const double t = span_s * tick / 10.0, x = label_width + t * scale;
    out += "<line x1=\"" + number(x) + "\" y1=\"" + number(axis_y) + "\" x2=\"" + number(x) + "\" y2=\"" +
           number(axis_y + 4) + "\" stroke=\"black\"/><text x=\"" + number(x) + "\" y=\"" + number(axis_y + 16) +
           "\" text-anchor=\"middle\">" + number(t * 1e3) + (tick == 10 ? " ms" : "") + "</text>\n";
  }
  out += "</svg>\n";
  return out;
}

void step_recorder::close_step() {
  if (!step_) return;
  makespan_sum_us_ += last_finish_us_ - first_us_;
  ++steps_;
}

void step_recorder::add(const stage_event& e) {
  if (e.step != step_) {
    if (step_ && e.step < *step_) return;  // a straggler of an earlier (aborted) step
    close_step();
    step_ = e.step;
    current_.clear();
    first_us_ = last_finish_us_ = e.time_us;
  }
  current_.push_back(e);
  first_us_ = std::min(first_us_, e.time_us);
  if (e.kind == event_kind::finish) last_finish_us_ = std::max(last_finish_us_, e.time_us);
}

double step_recorder::mean_makespan_s() const {
  double sum = makespan_sum_us_;
  std::size_t n = steps_;
  if (step_) sum += last_finish_us_ - first_us_, ++n;  // the step in progress, complete after the run
  return n > 0 ? sum / static_cast<double>(n) / 1e6 : 0.0;
}

}  // namespace ap

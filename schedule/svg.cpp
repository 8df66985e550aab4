// The simulated timeline as an SVG picture: one row per stage, one box per action coloured by its op.
#include <algorithm>
#include <cstdio>

#include "schedule/schedule.hpp"

namespace ap {

namespace {

constexpr double timeline_width = 960.0;  // pixels for the whole makespan
constexpr double label_width = 70.0;      // the "stage N" column
constexpr double row_height = 28.0;
constexpr double axis_height = 24.0;

std::string number(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", x);
  std::string s = buf;
  while (s.back() == '0') s.pop_back();
  if (s.back() == '.') s.pop_back();
  return s;
}

}  // namespace

std::string to_svg(const schedule& s, const simulation& sim) {
  const double scale = sim.makespan > 0.0 ? timeline_width / sim.makespan : 1.0;
  const double width = label_width + timeline_width + 20.0;
  const double height = axis_height + row_height * s.stages + 30.0;
  std::string out = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + number(width) + "\" height=\"" +
                    number(height) + "\" font-family=\"monospace\" font-size=\"11\">\n";
  out += "<title>" + s.name + ": " + std::to_string(s.stages) + " stages, " + std::to_string(s.microbatches) +
         " microbatches, " + std::to_string(s.chunks_per_stage) + " chunks per stage; makespan " +
         number(sim.makespan) + ", bubble " + number(100.0 * sim.bubble) + "% of ideal</title>\n";
  out += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  for (int stage = 0; stage < s.stages; ++stage)
    out += "<text x=\"4\" y=\"" + number(axis_height + row_height * stage + row_height * 0.65) + "\">stage " +
           std::to_string(stage) + "</text>\n";
  for (const auto& span : sim.spans) {
    const double x = label_width + span.start * scale;
    const double w = std::max(1.0, (span.end - span.start) * scale);
    // R runs on the stage's communication lane, a thin bar under its compute (Note [gradient reduction]).
    const bool lane = is_reduction(span.a);
    const double y = axis_height + row_height * span.stage + (lane ? row_height - 7.0 : 2.0);
    const double h = lane ? 5.0 : row_height - 4.0;
    const std::string label = to_string(span.a).substr(std::to_string(span.a.chunk).size());  // "F3", "B*"
    out += "<g><title>" + to_string(span.a) + " on stage " + std::to_string(span.stage) + ": " +
           number(span.start) + " .. " + number(span.end) + "</title>";
    out += "<rect x=\"" + number(x) + "\" y=\"" + number(y) + "\" width=\"" + number(w) + "\" height=\"" +
           number(h) + "\" fill=\"" + name_of(span.a.kind).colour + "\" stroke=\"#333\" stroke-width=\"0.5\"/>";
    if (!lane && w >= 7.0 * label.size())
      out += "<text x=\"" + number(x + w / 2) + "\" y=\"" + number(y + row_height * 0.6) +
             "\" text-anchor=\"middle\">" + label + "</text>";
    out += "</g>\n";
  }
  // Time axis: ten ticks across the makespan, drawn below the rows.
  const double axis_y = axis_height + row_height * s.stages + 4.0;
  out += "<line x1=\"" + number(label_width) + "\" y1=\"" + number(axis_y) + "\" x2=\"" +
         number(label_width + timeline_width) + "\" y2=\"" + number(axis_y) + "\" stroke=\"black\"/>\n";
  for (int tick = 0; tick <= 10; ++tick) {
    const double t = sim.makespan * tick / 10.0;
    const double x = label_width + t * scale;
    out += "<line x1=\"" + number(x) + "\" y1=\"" + number(axis_y) + "\" x2=\"" + number(x) + "\" y2=\"" +
           number(axis_y + 4) + "\" stroke=\"black\"/><text x=\"" + number(x) + "\" y=\"" + number(axis_y + 16) +
           "\" text-anchor=\"middle\">" + number(t) + "</text>\n";
  }
  // Legend at the top.
  for (std::size_t k = 0; k < op_count; ++k) {
    const double x = label_width + 60.0 * k;
    out += "<rect x=\"" + number(x) + "\" y=\"6\" width=\"12\" height=\"12\" fill=\"" + op_names[k].colour +
           "\"/><text x=\"" + number(x + 16) + "\" y=\"16\">" + op_names[k].letter + "</text>\n";
  }
  out += "</svg>\n";
  return out;
}

}  // namespace ap

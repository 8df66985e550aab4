#include "training/loss_curve.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>

namespace ap {

namespace {

constexpr double width = 800.0, height = 400.0;
constexpr double left = 60.0, right = 20.0, top = 40.0, bottom = 40.0;

std::string number(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", x);
  return buf;
}

std::string escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '<') out += "&lt;";
    else if (c == '>') out += "&gt;";
    else if (c == '&') out += "&amp;";
    else out += c;
  }
  return out;
}

}  // namespace

std::string to_svg(const loss_curve& curve, const std::string& title) {
  if (curve.steps.empty()) throw std::invalid_argument("loss curve: no steps to draw");
  double x0 = curve.steps.front().step, x1 = curve.steps.back().step, y1 = 0.0;
  for (const auto& p : curve.steps) {
    x0 = std::min(x0, p.step), x1 = std::max(x1, p.step);
    if (std::isfinite(p.loss)) y1 = std::max(y1, p.loss);
  }
  if (x1 <= x0) x1 = x0 + 1.0;
  if (y1 <= 0.0) y1 = 1.0;
  const double plot_w = width - left - right, plot_h = height - top - bottom;
  const auto x_of = [&](double step) { return left + (step - x0) / (x1 - x0) * plot_w; };
  const auto y_of = [&](double loss) { return top + plot_h - std::min(std::max(loss, 0.0), y1) / y1 * plot_h; };
  const auto line = [&](const std::vector<loss_curve::point>& points) {
    std::string text;
    for (const auto& p : points) text += number(x_of(p.step)) + "," + number(y_of(p.loss)) + " ";
    return text;
  };
  std::string out = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + number(width) + "\" height=\"" +
                    number(height) + "\" font-family=\"monospace\" font-size=\"11\">\n";
  out += "<title>" + escape(title) + "</title>\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  out += "<text x=\"" + number(left) + "\" y=\"20\" font-size=\"13\">" + escape(title) + "</text>\n";
  out += "<path d=\"M" + number(left) + "," + number(top) + " V" + number(top + plot_h) + " H" + number(left + plot_w) +
         "\" fill=\"none\" stroke=\"black\"/>\n";
  for (int k = 0; k <= 5; ++k) {
    const double step = x0 + (x1 - x0) * k / 5.0, loss = y1 * k / 5.0;
    out += "<text x=\"" + number(x_of(step)) + "\" y=\"" + number(top + plot_h + 16) + "\" text-anchor=\"middle\">" +
           number(std::round(step)) + "</text>\n";
    out += "<text x=\"" + number(left - 6) + "\" y=\"" + number(y_of(loss) + 4) + "\" text-anchor=\"end\">" +
           number(loss) + "</text>\n";
  }
  out += "<text x=\"" + number(left + plot_w / 2) + "\" y=\"" + number(height - 4) + "\" text-anchor=\"middle\">step</text>\n";
  out += "<polyline class=\"steps\" points=\"" + line(curve.steps) + "\" fill=\"none\" stroke=\"#9fc5e8\" stroke-width=\"1\"/>\n";
  if (!curve.epochs.empty()) {
    out += "<polyline class=\"epochs\" points=\"" + line(curve.epochs) + "\" fill=\"none\" stroke=\"#cc4125\" stroke-width=\"2\"/>\n";
    for (const auto& p : curve.epochs)
      out += "<circle cx=\"" + number(x_of(p.step)) + "\" cy=\"" + number(y_of(p.loss)) + "\" r=\"3\" fill=\"#cc4125\"><title>epoch mean " +
             number(p.loss) + " at step " + number(p.step) + "</title></circle>\n";
  }
  out += "<text x=\"" + number(left + plot_w - 250) + "\" y=\"20\" fill=\"#6fa8dc\">step loss</text><text x=\"" +
         number(left + plot_w - 150) + "\" y=\"20\" fill=\"#cc4125\">epoch mean</text>\n";
  out += "</svg>\n";
  return out;
}

}  // namespace ap

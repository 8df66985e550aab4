// What every benchmark program prints beside its figures: the median of repeats and the machine's load.
#pragma once

#include <algorithm>
#include <fstream>
#include <string>
#include <vector>

#include "model/spec_text.hpp"

namespace ap::bench {

// The middle value (the mean of the two middle ones for an even count); 0 for none.
inline double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// "1.40 1.45 2.16": the 1, 5 and 15 minute load averages ("unknown" where /proc/loadavg is not readable).
// On this 2-vCPU machine, above ~1 means another process competed for the cores.
inline std::string load_average() {
  std::ifstream f("/proc/loadavg");
  std::string a, b, c;
  f >> a >> b >> c;
  return f ? a + " " + b + " " + c : "unknown";
}

// Whether `name` contains one of the texts in `list`, separated by ';' (a benchmark's --only filter; its
// configuration names hold commas: "P=4, 4 threads each;D=16").
inline bool matches_any(const std::string& name, const std::string& list) {
  const std::vector<std::string> texts = split_fields(list, ';');
  return std::any_of(texts.begin(), texts.end(),
                     [&](const std::string& t) { return !t.empty() && name.find(t) != std::string::npos; });
}

}  // namespace ap::bench

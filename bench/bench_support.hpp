// What every benchmark shares. The first word picks the mode; each mode prints a table, then one JSON line.
#pragma once

#include <sys/resource.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "model/spec_text.hpp"

namespace ap::bench {

using clock_type = std::chrono::steady_clock;

// The median (mean of the two middle values for an even count); 0 for none.
inline double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// The q-quantile of `v` (q in [0, 1]); 0 for none.
inline double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<std::size_t>(q * double(v.size())))];
}

inline double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

// The median seconds of `repeats` calls of f after one warm-up call.
inline double median_seconds(int repeats, const std::function<void()>& f) {
  f();
  std::vector<double> t;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = clock_type::now();
    f();
    t.push_back(seconds_since(t0));
  }
  return median(t);
}

// CPU seconds of the calling thread.
inline double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

// CPU seconds (user + system) of every thread of this process.
inline double process_cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  const auto s = [](const timeval& t) { return static_cast<double>(t.tv_sec) + 1e-6 * static_cast<double>(t.tv_usec); };
  return s(u.ru_utime) + s(u.ru_stime);
}

// A /proc/self/status field in KiB ("VmRSS"); -1 where it cannot be read.
inline long status_kib(const std::string& field) {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind(field + ":", 0) == 0) return std::strtol(line.c_str() + field.size() + 1, nullptr, 10);
  return -1;
}

// "1.40 1.45 2.16": the 1, 5 and 15 minute load averages ("unknown" if unreadable).
inline std::string load_average() {
  std::ifstream f("/proc/loadavg");
  std::string a, b, c;
  f >> a >> b >> c;
  return f ? a + " " + b + " " + c : "unknown";
}

// Whether `name` contains one of the ';'-separated texts in `list` (--only; names hold commas).
inline bool matches_any(const std::string& name, const std::string& list) {
  const std::vector<std::string> texts = split_fields(list, ';');
  return std::any_of(texts.begin(), texts.end(),
                     [&](const std::string& t) { return !t.empty() && name.find(t) != std::string::npos; });
}

// A mode's bad option: printed with the mode's usage; the program exits with 2.
struct usage_error : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

// The options of one mode. Each read takes its option out; done() refuses what is left.
class arguments {
 public:
  explicit arguments(std::vector<std::string> words) : words_(std::move(words)) {}

  bool flag(const std::string& name) {
    const auto it = std::find(words_.begin(), words_.end(), name);
    if (it == words_.end()) return false;
    words_.erase(it);
    return true;
  }
  std::string text(const std::string& name, const std::string& fallback) {
    const auto it = std::find(words_.begin(), words_.end(), name);
    if (it == words_.end()) return fallback;
    if (it + 1 == words_.end()) throw usage_error(name + " needs a value");
    std::string value = *(it + 1);
    words_.erase(it, it + 2);
    return value;
  }
  long integer(const std::string& name, long fallback, long least = 0) {
    const std::string t = text(name, "");
    if (t.empty()) return fallback;
    std::size_t used = 0;
    long v = 0;
    try {
      v = std::stol(t, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != t.size()) throw usage_error(name + " takes a whole number, not '" + t + "'");
    if (v < least) throw usage_error(name + " must be at least " + std::to_string(least) + ", not " + t);
    return v;
  }
  double number(const std::string& name, double fallback) {
    const std::string t = text(name, "");
    if (t.empty()) return fallback;
    std::size_t used = 0;
    double v = 0;
    try {
      v = std::stod(t, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != t.size() || !(v > 0)) throw usage_error(name + " takes a positive number, not '" + t + "'");
    return v;
  }
  // "1,2,4" after `name`, each at least 1.
  std::vector<int> integers(const std::string& name, std::vector<int> fallback) {
    const std::string t = text(name, "");
    if (t.empty()) return fallback;
    std::vector<int> out;
    for (const std::string& field : split_fields(t, ',')) {
      std::size_t used = 0;
      int v = 0;
      try {
        v = std::stoi(field, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (field.empty() || used != field.size() || v < 1)
        throw usage_error(name + " takes positive whole numbers separated by commas, not '" + t + "'");
      out.push_back(v);
    }
    return out;
  }
  void done() const {
    if (!words_.empty()) throw usage_error("unknown option '" + words_.front() + "'");
  }

 private:
  std::vector<std::string> words_;
};

// A mode: its name, its options for the usage text, and what runs it.
struct mode {
  std::string name, options, what;
  std::function<int(arguments&)> run;
};

// Runs the mode the first word names; a usage error exits with 2 and the usage, any other error with 1.
inline int run_mode(int argc, char** argv, const std::string& program, const std::vector<mode>& modes) {
  std::vector<std::string> words(argv + 1, argv + argc);
  const mode* chosen = &modes.front();
  if (!words.empty() && words.front().rfind("-", 0) != 0) {
    const auto it = std::find_if(modes.begin(), modes.end(), [&](const mode& m) { return m.name == words.front(); });
    chosen = it == modes.end() ? nullptr : &*it;
    if (chosen) words.erase(words.begin());
  }
  const auto usage = [&] {
    std::fprintf(stderr, "usage: %s [MODE] [OPTIONS] (MODE: the first one where none is named)\n", program.c_str());
    for (const mode& m : modes)
      std::fprintf(stderr, "  %s %s %s\n      %s\n", program.c_str(), m.name.c_str(), m.options.c_str(), m.what.c_str());
  };
  if (!chosen) {
    std::fprintf(stderr, "%s: unknown mode '%s'\n", program.c_str(), words.front().c_str());
    usage();
    return 2;
  }
  if (std::find(words.begin(), words.end(), "--help") != words.end()) {
    usage();
    return 0;
  }
  try {
    arguments args(words);
    return chosen->run(args);
  } catch (const usage_error& e) {
    std::fprintf(stderr, "%s %s: %s\n", program.c_str(), chosen->name.c_str(), e.what());
    usage();
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s %s: %s\n", program.c_str(), chosen->name.c_str(), e.what());
    return 1;
  }
}

// The command that starts this program again, through the dynamic loader where it was started so
// (scripts/device_bundle.sh), so children run the same way.
inline std::vector<std::string> self_command() {
  const std::string exe = std::filesystem::read_symlink("/proc/self/exe").string();
  if (std::filesystem::path(exe).filename().string().rfind("ld-", 0) != 0) return {exe};
  std::ifstream f("/proc/self/cmdline", std::ios::binary);
  const std::string all((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::vector<std::string> args;
  for (std::size_t at = 0; at < all.size();) {
    const std::size_t end = all.find('\0', at);
    args.push_back(all.substr(at, end == std::string::npos ? std::string::npos : end - at));
    if (end == std::string::npos) break;
    at = end + 1;
  }
  static const std::set<std::string> with_value = {"--library-path", "--preload", "--audit", "--argv0",
                                                   "--glibc-hwcaps-prepend", "--glibc-hwcaps-mask"};
  std::vector<std::string> command;
  std::size_t i = 0;
  if (i < args.size()) command.push_back(args[i++]);  // the loader
  for (; i < args.size() && args[i].rfind("--", 0) == 0; ++i) {
    command.push_back(args[i]);
    if (with_value.count(args[i]) && i + 1 < args.size()) command.push_back(args[++i]);
  }
  if (i >= args.size()) throw std::runtime_error("self_command: no program after the loader's options in /proc/self/cmdline");
  command.push_back(args[i]);
  return command;
}

// This build's actorpipe: build/cli/actorpipe or the one packed beside this program.
inline std::vector<std::string> actorpipe_command() {
  std::vector<std::string> command = self_command();
  const std::string dir = command.back().substr(0, command.back().rfind('/') + 1);
  command.back() = std::filesystem::exists(dir + "../cli/actorpipe") ? dir + "../cli/actorpipe" : dir + "actorpipe";
  return command;
}

// `command` as one shell line, each word single-quoted.
inline std::string shell_line(const std::vector<std::string>& command) {
  std::string line;
  for (const std::string& word : command) {
    if (!line.empty()) line += ' ';
    line += '\'';
    for (char c : word) line += c == '\'' ? std::string("'\\''") : std::string(1, c);
    line += '\'';
  }
  return line;
}

}  // namespace ap::bench

// What every benchmark program prints beside its figures: the median of repeats and the machine's load; and how
// a benchmark that runs several processes starts them.
#pragma once

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <stdexcept>
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

// The command that starts this program again: its path, or, where it runs through the dynamic loader (as the
// programs that scripts/device_bundle.sh packs for a machine without our libraries do:
// `ld-linux-x86-64.so.2 --library-path DIR PROGRAM ARGS`), the loader, its options and the program, so that a
// benchmark's child processes run the same way.
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

// The command that starts this build's actorpipe the way this program was started: build/cli/actorpipe beside
// build/bench/, or the actorpipe packed beside this program.
inline std::vector<std::string> actorpipe_command() {
  std::vector<std::string> command = self_command();
  const std::string dir = command.back().substr(0, command.back().rfind('/') + 1);
  command.back() = std::filesystem::exists(dir + "../cli/actorpipe") ? dir + "../cli/actorpipe" : dir + "actorpipe";
  return command;
}

// `command` as one line for the shell, each word in single quotes.
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

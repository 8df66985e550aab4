#include "cli/checks.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include "tensor/dtype.hpp"

namespace ap::cli {

CLI::Validator whole_number(std::uint64_t min, std::uint64_t max) {
  std::string wanted = "a whole number >= " + std::to_string(min);
  if (max != std::numeric_limits<std::uint64_t>::max()) wanted = "a whole number from " + std::to_string(min) +
                                                                 " to " + std::to_string(max);
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        // "1, 4" after a comma split (--layers-per-chunk 1,4 or "1, 4"): the spaces around a number are not part of it.
        text.erase(0, std::min(text.size(), text.find_first_not_of(" \t")));
        text.erase(text.find_last_not_of(" \t") + 1);
        const std::string bad = text + " is not " + wanted;
        if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos) return bad;
        errno = 0;
        const unsigned long long v = std::strtoull(text.c_str(), nullptr, 10);
        if (errno == ERANGE || v < min || v > max) return bad;
        return "";
      },
      "UINT", "whole_number");
}

namespace {
std::string shortest(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", v);
  return text;
}
}  // namespace

CLI::Validator real_number(double min, bool inclusive, double below) {
  std::string wanted = std::string("a number ") + (inclusive ? ">= " : "> ") + shortest(min);
  if (std::isfinite(below)) wanted += " and < " + shortest(below);
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        char* end = nullptr;
        errno = 0;
        const double v = std::strtod(text.c_str(), &end);
        const bool parsed = !text.empty() && end == text.c_str() + text.size() && errno != ERANGE;
        if (!parsed || !std::isfinite(v) || v < min || (!inclusive && v == min) || !(v < below))
          return text + " is not " + wanted;
        return "";
      },
      "REAL", "real_number");
}

CLI::Validator dtype_name() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        if (parse_dtype(text)) return "";
        return text + " is not a dtype: expected fp32 or bf16 (float32, bfloat16)";
      },
      "DTYPE", "dtype_name");
}

void check_output_path(const std::string& flag, const std::string& path) {
  namespace fs = std::filesystem;
  if (path.empty()) return;
  const std::string where = flag + " " + path + ": ";
  std::error_code ec;
  if (fs::is_directory(path, ec)) throw std::invalid_argument(where + "is a folder; give a file name");
  fs::path folder = fs::path(path).parent_path();
  if (folder.empty()) folder = ".";
  if (!fs::is_directory(folder, ec))
    throw std::invalid_argument(where + "the folder " + folder.string() + " does not exist");
  // access(W_OK) would not see a read-only mount or some ACLs: create a file, as the real write will.
  const std::string probe = (folder / (".actorpipe-probe-" + std::to_string(::getpid()))).string();
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0 && errno != EEXIST)
    throw std::invalid_argument(where + "cannot create a file in the folder " + folder.string() + " (" +
                                std::strerror(errno) + ")");
  if (fd >= 0) {
    ::close(fd);
    ::unlink(probe.c_str());
  }
}

void refuse_given(const std::vector<const CLI::Option*>& options, const std::string& why) {
  for (const CLI::Option* o : options)
    if (o->count() > 0) throw std::invalid_argument(o->get_name() + " " + why);
}

}  // namespace ap::cli

// Helpers shared by the test files: scratch folders, error texts, random tensors, llm.c's check_tensor.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "random/seeded_random.hpp"
#include "tensor/tensor.hpp"

namespace ap::test {

// A fresh folder per test case (CTest may run cases in parallel), removed at the end.
struct scratch_dir {
  std::filesystem::path path;
  explicit scratch_dir(const std::string& prefix) {
    static int counter = 0;
    path = std::filesystem::temp_directory_path() /
           ("ap_test_" + prefix + "_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~scratch_dir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::string file(const std::string& name) const { return (path / name).string(); }
  // Names of leftover temporary files (".tmp-").
  std::vector<std::string> temporaries() const {
    std::vector<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(path))
      if (e.path().filename().string().find(".tmp-") != std::string::npos) names.push_back(e.path().filename());
    return names;
  }
};

// The what() of the exception f throws, or "no exception".
template <class F>
std::string error_of(F f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "no exception";
}

inline bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }
// How many times `part` occurs in `text` (overlapping occurrences counted).
inline std::size_t count_of(const std::string& text, const std::string& part) {
  std::size_t n = 0;
  for (std::size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

// Wall seconds f takes.
template <class F>
double seconds_of(F f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Note [test time scale]: a limit a test puts on a wait that should end (how long a peer may take to answer, a
// program to print its line or exit, a "never hangs" check) is multiplied by AP_TEST_TIME_SCALE (default 1).
// scripts/sanitize.sh sets it to 4: sanitized code runs several times slower, and parallel tests share two cores.
// Only bounds scale: a test never asserts that something is fast.
// Where: once, where the test writes the number, `test::scaled(120s)`, whether the limit goes to one of the tests'
// helpers (child_process::read_line, wait_exit), to the library (a group's or a rendezvous's timeout) or into a
// deadline or a CHECK of seconds taken. The helpers never scale: they take a scaled_limit, which only scaled()
// makes, so a plain duration given to a helper does not compile, and neither does scaling a scaled_limit again.
// Not scaled: a wait the test expects to run out (nothing may arrive within 50 ms; a timeout whose firing is the
// behaviour checked, its value named in the message), which a slow machine cannot make fail; a timeout set long
// only so that it never fires; and sleeps. CTest's limit on a whole test is scaled alike (tests/CMakeLists.txt),
// so that a wait that runs out ends with the test's own message.
inline double time_scale() {
  const char* env = std::getenv("AP_TEST_TIME_SCALE");
  const double scale = env ? std::atof(env) : 1.0;
  return scale >= 1.0 ? scale : 1.0;
}
// Seconds, for a bound on seconds_of() and the like.
inline double scaled(double seconds) { return seconds * time_scale(); }
// A duration scaled by scaled(): a std::chrono::milliseconds wherever one is taken (a library's timeout, a
// deadline), and the only limit the helpers that wait accept.
class scaled_limit : public std::chrono::milliseconds {
  explicit scaled_limit(std::chrono::milliseconds limit) : std::chrono::milliseconds(limit) {}
  friend scaled_limit scaled(std::chrono::milliseconds limit);
};
inline scaled_limit scaled(std::chrono::milliseconds limit) {
  return scaled_limit(std::chrono::milliseconds(static_cast<std::chrono::milliseconds::rep>(limit.count() * time_scale())));
}
void scaled(scaled_limit) = delete;  // scaled once, never twice

// Uniform in [-scale, scale), the same for the same seed on every platform.
inline tensor random_tensor(const shape_t& shape, std::uint64_t seed, float scale = 1.0f) {
  tensor t = tensor::from_shape(shape);
  splitmix64 random(seed);
  for (float& v : t) v = symmetric_unit_float(random.next()) * scale;
  return t;
}

// sum(y * r) in double: a scalar objective whose gradient w.r.t. y is r (for finite differences).
inline double objective(const tensor& y, const tensor& r) {
  double s = 0.0;
  for (std::size_t i = 0; i < y.size(); ++i) s += double(y.data()[i]) * double(r.data()[i]);
  return s;
}

// llm.c's check_tensor: element by element, printing the first few that differ.
inline bool check_close(const tensor& actual, const tensor& expected, double atol, double rtol, const std::string& label) {
  if (actual.shape() != expected.shape()) {
    std::printf("%s: shape %s, expected %s\n", label.c_str(), shape_string(actual).c_str(),
                shape_string(expected).c_str());
    return false;
  }
  int bad = 0;
  for (std::size_t i = 0; i < actual.size(); ++i) {
    const double a = actual.data()[i], e = expected.data()[i];
    if (std::fabs(a - e) <= atol + rtol * std::max(std::fabs(a), std::fabs(e))) continue;
    if (bad++ < 5) std::printf("%s[%zu]: %.7g, expected %.7g\n", label.c_str(), i, a, e);
  }
  return bad == 0;
}

}  // namespace ap::test

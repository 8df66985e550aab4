// The harness of "training here equals training in one process" (habit 7's second oracle): two models'
// parameters compared bit for bit or within a tolerance, printing the first parameter, index and both values
// that differ (llm.c's check_tensor); two runs' losses and parameters; and a call refused with a text.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <map>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "model/sequential.hpp"
#include "tensor/tensor.hpp"

namespace ap::test {

// Every element of `actual` equals `expected`'s: bit for bit when tolerance is 0, else within `tolerance`
// relative, |a - e| / max(1, |a|, |e|) (max_relative_difference's measure; bfloat16 is compared as float).
// On a difference prints the label, the first index that differs and both values, how many differ and the
// worst relative difference, and returns false.
inline bool check_tensor(const tensor& actual, const tensor& expected, float tolerance, const std::string& label) {
  if (actual.shape() != expected.shape()) {
    MESSAGE(label << ": shape " << shape_string(actual) << ", expected " << shape_string(expected));
    return false;
  }
  tensor wa, we;
  const tensor& a = actual.type() == dtype::float32 ? actual : (wa = actual.astype(dtype::float32));
  const tensor& e = expected.type() == dtype::float32 ? expected : (we = expected.astype(dtype::float32));
  std::size_t bad = 0, first = 0;
  float worst = 0.0f;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const float x = a.data()[i], y = e.data()[i];
    const float d = std::fabs(x - y) / std::max({1.0f, std::fabs(x), std::fabs(y)});
    const bool same = tolerance == 0.0f ? std::memcmp(&x, &y, sizeof(float)) == 0 : d <= tolerance;  // NaN: not same
    if (same) continue;
    if (bad++ == 0) first = i;
    worst = std::isnan(d) || std::isnan(worst) ? NAN : std::max(worst, d);
  }
  if (bad == 0) return true;
  MESSAGE(label << "[" << first << "] = " << a.data()[first] << ", expected " << e.data()[first] << " ("
                << bad << " of " << a.size() << " differ, worst relative difference " << worst
                << (tolerance == 0.0f ? ", bit for bit)" : ", tolerance " + std::to_string(tolerance) + ")"));
  return false;
}

// Every parameter of `actual` equals the one of the same name in `expected` (check_tensor: bit for bit when
// tolerance is 0). With `same_names` both hold the same names; without, `actual` may be a part of
// `expected` (a stage's slice of the whole model). Prints each missing or differing parameter.
inline bool check_parameters(sequential& actual, sequential& expected, float tolerance, const std::string& label,
                             bool same_names = true) {
  std::map<std::string, const tensor*> theirs;
  for (const parameter& p : expected.parameters()) theirs[p.name] = p.value;
  bool same = true;
  std::size_t matched = 0;
  for (const parameter& p : actual.parameters()) {
    const auto it = theirs.find(p.name);
    if (it == theirs.end()) {
      MESSAGE(label << ": parameter " << p.name << " is missing from the expected model");
      same = false;
      continue;
    }
    ++matched;
    same = check_tensor(*p.value, *it->second, tolerance, label + ": " + p.name) && same;
  }
  if (same_names && matched != theirs.size()) {
    MESSAGE(label << ": " << theirs.size() - matched << " of the expected model's parameters are missing");
    same = false;
  }
  return same;
}

// check_parameters as a doctest check.
inline void check_same_parameters(sequential& actual, sequential& expected, float tolerance, const std::string& label) {
  CHECK_MESSAGE(check_parameters(actual, expected, tolerance, label), label);
}

// One training run: the model it ends with and each step's loss.
struct run_result {
  sequential model;
  std::vector<double> losses;
};

// The same run: each step's loss within `loss_tolerance` (relative, doctest::Approx) and every parameter
// within `tolerance` (0: bit for bit).
inline void check_same_run(run_result& actual, run_result& expected, float tolerance, double loss_tolerance,
                           const std::string& label) {
  REQUIRE_MESSAGE(actual.losses.size() == expected.losses.size(), label);
  for (std::size_t s = 0; s < expected.losses.size(); ++s) {
    INFO(label << ": loss of step " << s);
    CHECK(actual.losses[s] == doctest::Approx(expected.losses[s]).epsilon(loss_tolerance));
  }
  check_same_parameters(actual.model, expected.model, tolerance, label);
}

// `call` is refused: it throws a std::exception whose text contains every one of `parts`. Returns the text
// ("no exception" when it did not throw).
template <class F>
std::string check_refused(F&& call, std::initializer_list<std::string> parts) {
  std::string text = "no exception";
  try {
    call();
  } catch (const std::exception& e) {
    text = e.what();
  }
  INFO("refusal: " << text);
  CHECK(text != "no exception");
  for (const std::string& part : parts) CHECK_MESSAGE(text.find(part) != std::string::npos, "missing: " << part);
  return text;
}

}  // namespace ap::test

// Small models and data shared by the pipeline tests.
#pragma once

#include <map>
#include <string>

#include <doctest/doctest.h>

#include "data/synthetic.hpp"
#include "model/sequential.hpp"

namespace ap::test {

// Nine layers with every kind that has parameters or randomness: enough for 4 stages x 2 chunks.
inline sequential nine_layer_model(std::uint64_t seed = 7) {
  sequential m;
  for (const char* spec : {"linear:12:16", "layernorm:16", "gelu", "dropout:0.2:11", "linear:16:16", "tanh",
                           "linear:16:16", "relu", "linear:16:4"})
    m.add(make_layer(spec));
  m.initialize(seed);
  return m;
}

inline dataset small_blobs(std::size_t samples = 48) { return make_blobs(samples, 12, 4, 3); }

inline std::map<std::string, tensor> parameter_values(sequential& m) {
  std::map<std::string, tensor> out;
  for (auto& p : m.parameters()) out[p.name] = *p.value;
  return out;
}

// Every parameter agrees within `tolerance` (relative, see max_relative_difference); names the worst one.
inline void check_same_parameters(sequential& a, sequential& b, float tolerance, const std::string& label) {
  const auto pa = parameter_values(a), pb = parameter_values(b);
  REQUIRE(pa.size() == pb.size());
  for (const auto& [name, value] : pa) {
    const float d = max_relative_difference(value, pb.at(name));
    INFO(label << ": parameter " << name << " differs by " << d);
    CHECK(d <= tolerance);
  }
}

}  // namespace ap::test

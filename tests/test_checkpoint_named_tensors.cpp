// Binding named tensors (Note [binding named tensors]): the one function behind checkpoints, stage states,
// stage specs and gathered pipelines. It fills every target, names what is missing, mis-shaped or
// unexpected, and changes nothing when it refuses.
#include <doctest/doctest.h>

#include <string>

#include "checkpoint/named_tensors.hpp"

using namespace ap;

namespace {

tensor filled(const shape_t& shape, float value) {
  tensor t = zeros(shape);
  for (float& v : t) v = value;
  return t;
}

}  // namespace

TEST_CASE("binding fills every target from the source of its name") {
  tensor w = zeros({2, 3}), b = zeros({3});
  named_tensors given;
  given.names = {"0.bias", "0.weight"};
  given.values = {filled({3}, 2.0f), filled({2, 3}, 1.0f)};
  tensor_sources sources;
  REQUIRE(add_sources(sources, given, "stage 0").empty());
  const std::vector<tensor_target> targets = {{"0.weight", &w, "the model's parameter"}, {"0.bias", &b, "the model's parameter"}};
  CHECK(bind_named_tensors(targets, sources, "no parameter").empty());
  for (float v : w) CHECK(v == 1.0f);
  for (float v : b) CHECK(v == 2.0f);
}

TEST_CASE("binding refuses, naming the tensor, its source and its target, and changes nothing") {
  tensor w = filled({2, 3}, 7.0f), b = filled({3}, 7.0f);
  const std::vector<tensor_target> targets = {{"0.weight", &w, "its parameter"}, {"0.bias", &b, "its parameter"}};
  named_tensors given;
  std::string expected;
  SUBCASE("missing") {
    given.names = {"0.weight"};
    given.values = {filled({2, 3}, 1.0f)};
    expected = "missing tensor 0.bias (its parameter)";
  }
  SUBCASE("mis-shaped") {
    given.names = {"0.weight", "0.bias"};
    given.values = {filled({2, 3}, 1.0f), filled({4}, 1.0f)};
    expected = "tensor 0.bias from stage 2 has shape (4) but its parameter has shape (3)";
  }
  SUBCASE("of another dtype") {
    given.names = {"0.weight", "0.bias"};
    given.values = {filled({2, 3}, 1.0f).astype(dtype::bfloat16), filled({3}, 1.0f)};
    expected = "tensor 0.weight from stage 2 is bfloat16 (2, 3), its parameter is float32 (2, 3)";
  }
  SUBCASE("unexpected") {
    given.names = {"0.weight", "0.bias", "1.gamma"};
    given.values = {filled({2, 3}, 1.0f), filled({3}, 1.0f), filled({1}, 1.0f)};
    expected = "unexpected tensor 1.gamma from stage 2: no parameter of this stage";
  }
  tensor_sources sources;
  REQUIRE(add_sources(sources, given, "stage 2").empty());
  CHECK(bind_named_tensors(targets, sources, "no parameter of this stage") == expected);
  for (float v : w) CHECK(v == 7.0f);
  for (float v : b) CHECK(v == 7.0f);
}

TEST_CASE("sources: a name given twice, or names and tensors that do not pair up, are refused") {
  named_tensors first, second;
  first.names = {"0.weight"};
  first.values = {zeros({1})};
  second = first;
  tensor_sources sources;
  CHECK(add_sources(sources, first, "stage 0").empty());
  CHECK(add_sources(sources, second, "stage 1") == "tensor 0.weight given twice (by stage 0 and stage 1)");
  named_tensors uneven;
  uneven.names = {"a", "b"};
  uneven.values = {zeros({1})};
  tensor_sources other;
  CHECK(add_sources(other, uneven) == "2 names for 1 tensors");
}

TEST_CASE("parameters and optimizer state go out under their names and come back through the same names") {
  tensor w = filled({2}, 3.0f), dw = zeros({2}), m = filled({2}, 5.0f);
  const std::vector<parameter> params = {{"4.weight", &w, &dw}};
  const std::map<std::string, tensor*> state = {{"4.weight.m", &m}};
  named_tensors out;
  add_parameters(out, params);
  add_optimizer_state(out, state, "optimizer/");
  CHECK(out.names == std::vector<std::string>{"4.weight", "optimizer/4.weight.m"});
  tensor w2 = zeros({2}), m2 = zeros({2});
  std::vector<tensor_target> targets = parameter_targets({{"4.weight", &w2, nullptr}}, "its parameter");
  for (auto& t : optimizer_state_targets({{"4.weight.m", &m2}}, "optimizer/", "its optimizer state")) targets.push_back(t);
  tensor_sources sources;
  REQUIRE(add_sources(sources, out).empty());
  CHECK(bind_named_tensors(targets, sources, "-").empty());
  CHECK(w2.data()[1] == 3.0f);
  CHECK(m2.data()[0] == 5.0f);
}

// A stage's state for checkpoints: exported under global names, serialisable for remote stages, and loaded
// whole or refused naming the stage and the tensor.
#include <doctest/doctest.h>

#include <string>

#include <caf/binary_deserializer.hpp>
#include <caf/binary_serializer.hpp>

#include "actors/messages.hpp"
#include "stage/stage_rank.hpp"
#include "pipeline_test_models.hpp"
#include "test_support.hpp"

using namespace ap;

namespace {

using namespace ap::test;

optimizer_config adam() {
  optimizer_config o;
  o.kind = "adam";
  o.lr = 0.01f;
  return o;
}

}  // namespace

TEST_CASE("stage state: exported under global names, refused whole when a tensor is missing or mis-shaped") {
  sequential model = test::nine_layer_model();
  auto make_stage = [&](std::uint64_t seed) {
    sequential source = test::nine_layer_model(seed);
    std::vector<sequential> slices;
    slices.push_back(source.slice(4, 6));
    slices.push_back(source.slice(8, 9));
    return stage_rank(1, {1, 3}, std::move(slices), adam());
  };
  stage_rank stage = make_stage(7);
  const tensor x = zeros({3, 16});
  stage.forward(0, 0, 1, 0, x);
  stage.backward(0, 1, zeros({3, 16}));
  stage.apply_optimizer();
  const stage_state state = stage.export_state();
  CHECK(state.stage == 1);
  CHECK(state.optimizer_steps == 1);
  CHECK(state.tensors.names ==
        std::vector<std::string>{"4.weight", "4.bias", "8.weight", "8.bias", "optimizer/4.bias.m", "optimizer/4.bias.v",
                                 "optimizer/4.weight.m", "optimizer/4.weight.v", "optimizer/8.bias.m",
                                 "optimizer/8.bias.v", "optimizer/8.weight.m", "optimizer/8.weight.v"});

  SUBCASE("a round trip through CAF's binary serialisation, then into another stage") {
    caf::actor_system_config cfg;
    caf::actor_system sys{cfg};
    std::vector<char> buffer;
    caf::binary_serializer sink{sys, buffer};
    stage_state copy = state;
    REQUIRE(!sink(copy));
    stage_state got;
    caf::binary_deserializer source{sys, buffer};
    REQUIRE(!source(got));
    CHECK(got.optimizer_steps == 1);
    CHECK(got.tensors.names == state.tensors.names);
    stage_rank other = make_stage(99);
    other.import_state(got);
    const stage_state again = other.export_state();
    REQUIRE(again.tensors.values.size() == state.tensors.values.size());
    for (std::size_t i = 0; i < again.tensors.values.size(); ++i) {
      INFO(again.tensors.names[i]);
      CHECK(max_relative_difference(again.tensors.values[i], state.tensors.values[i]) == 0.0f);
    }
  }
  SUBCASE("refusals") {
    stage_rank other = make_stage(99);
    const stage_state before = other.export_state();
    stage_state broken = state;
    std::string expected;
    SUBCASE("missing parameter") {
      broken.tensors.names.erase(broken.tensors.names.begin() + 2);
      broken.tensors.values.erase(broken.tensors.values.begin() + 2);
      expected = "stage 1: cannot load its state: missing tensor 8.weight";
    }
    SUBCASE("missing optimizer state") {
      broken.tensors.names.pop_back();
      broken.tensors.values.pop_back();
      expected = "stage 1: cannot load its state: missing tensor optimizer/8.weight.v";
    }
    SUBCASE("mis-shaped") {
      broken.tensors.values[1] = zeros({3});
      expected = "stage 1: cannot load its state: tensor 4.bias has shape (3) but its parameter has shape (16)";
    }
    SUBCASE("unexpected") {
      broken.tensors.names.push_back("2.weight");
      broken.tensors.values.push_back(zeros({2}));
      expected = "stage 1: cannot load its state: unexpected tensor 2.weight: neither a parameter of this stage";
    }
    const std::string error = error_of([&] { other.import_state(broken); });
    CHECK(contains(error, expected));
    const stage_state after = other.export_state();
    CHECK(after.tensors.names == before.tensors.names);
    CHECK(after.optimizer_steps == 0);
    for (std::size_t i = 0; i < after.tensors.values.size(); ++i)
      CHECK(max_relative_difference(after.tensors.values[i], before.tensors.values[i]) == 0.0f);
  }
}

TEST_CASE("a layer's error inside a stage names the stage, chunk, layers, microbatch, the layer and the shapes") {
  sequential model = sequential::from_layer_specs({"linear:12:16", "relu", "linear:16:4", "sigmoid"});
  model.initialize(1);
  std::vector<sequential> slices;
  slices.push_back(model.slice(2, 4));
  stage_rank stage(1, {1}, std::move(slices), adam());
  CHECK(error_of([&] { stage.forward(0, 3, 1, 0, zeros({8, 12})); }) ==
        "stage 1 (chunk 1, layers 2..3: Linear(16->4) Sigmoid), forward microbatch 3: "
        "layer 2 Linear(16->4) takes 16 features, got input of shape (8, 12)");
  CHECK(error_of([&] { stage.forward(0, 3, 1, 0, zeros({8, 16}, dtype::bfloat16)); }) ==
        "stage 1 (chunk 1, layers 2..3: Linear(16->4) Sigmoid), forward microbatch 3: "
        "layer 2 Linear(16->4) takes float32 input, got bfloat16 (8, 16)");
  stage.forward(0, 3, 1, 0, zeros({8, 16}));
  CHECK(error_of([&] { stage.backward(3, 1, zeros({8, 4}, dtype::bfloat16)); }) ==
        "stage 1 (chunk 1, layers 2..3: Linear(16->4) Sigmoid), backward microbatch 3: "
        "layer 3 Sigmoid takes float32 dy, got bfloat16 (8, 4)");
  stage.forward(0, 4, 1, 0, zeros({8, 16}));
  CHECK(error_of([&] { stage.backward_input(4, 1, zeros({8, 5})); }) ==
        "stage 1 (chunk 1, layers 2..3: Linear(16->4) Sigmoid), backward_input microbatch 4: "
        "layer 3 Sigmoid backward: dy of shape (8, 5) does not match the forward's (8, 4)");
}

// Tensor parallelism asks the registry how a kind splits, so a user's layer
// kinds split (and let pairs span them) like the built-in ones (Note [tensor-parallel split]).
#include <doctest/doctest.h>

#include "model/layer_registry.hpp"
#include "model/linear.hpp"
#include "model/relu.hpp"
#include "model/tensor_parallel.hpp"

using namespace ap;

namespace {

// A user's Linear that says it pairs as the built-in column/row-parallel Linear layers.
tensor_parallel_traits user_pairs() {
  tensor_parallel_traits t;
  t.column_kind = "column_linear";
  t.row_kind = "row_linear";
  return t;
}
const layer_kind_registration user_linear{"user_linear",
                                          [](const layer_spec& s) -> std::unique_ptr<layer> {
                                            s.expect_fields(2, "user_linear:IN:OUT");
                                            return std::make_unique<linear>(s.width(0), s.width(1));
                                          },
                                          user_pairs()};

tensor_parallel_traits elementwise() {
  tensor_parallel_traits t;
  t.elementwise = true;
  return t;
}
const layer_kind_registration user_activation{"user_activation",
                                              [](const layer_spec&) -> std::unique_ptr<layer> {
                                                return std::make_unique<relu>();
                                              },
                                              elementwise()};
const layer_kind_registration user_opaque{"user_opaque", [](const layer_spec&) -> std::unique_ptr<layer> {
                                            return std::make_unique<relu>();
                                          }};

}  // namespace

TEST_CASE("a user's kinds split as they registered: pairs, element-wise layers a pair spans, opaque ones it does not") {
  CHECK(tensor_parallel_specs({"user_linear:8:16", "user_activation", "user_linear:16:8"}) ==
        std::vector<std::string>{"column_linear:8:16", "user_activation", "row_linear:16:8"});
  CHECK(tensor_parallel_specs({"user_linear:8:16", "user_opaque", "user_linear:16:8", "relu", "linear:8:4"}) ==
        std::vector<std::string>{"user_linear:8:16", "user_opaque", "column_linear:16:8", "relu", "row_linear:8:4"});
  CHECK(tensor_parallel_specs({"residual[layernorm:8,user_linear:8:32,gelu,user_linear:32:8]"}) ==
        std::vector<std::string>{"residual[layernorm:8,column_linear:8:32,gelu,row_linear:32:8]"});
}

TEST_CASE("the built-in kinds' traits: Linear pairs, attention splits its heads, blocks split their parts") {
  CHECK(tensor_parallel_traits_of("linear").column_kind == "column_linear");
  CHECK(tensor_parallel_traits_of("linear").row_kind == "row_linear");
  CHECK(tensor_parallel_traits_of("attention").split_kind == "head_parallel_attention");
  CHECK(tensor_parallel_traits_of("gelu").elementwise);
  CHECK_FALSE(tensor_parallel_traits_of("dropout").elementwise);
  CHECK(tensor_parallel_traits_of("block").split_parts);
  CHECK(tensor_parallel_traits_of("no_such_kind").split_kind.empty());
}

TEST_CASE("split_layers_text names split layers by asking the layers, composites with their split parts") {
  sequential mlp = sequential::from_layer_specs(tensor_parallel_specs({"linear:12:10", "relu", "linear:10:4"}));
  CHECK(split_layers_text(mlp) == "0 column_linear:12:10, 2 row_linear:10:4");
  sequential whole = sequential::from_layer_specs({"linear:12:10", "relu", "linear:10:4"});
  CHECK(split_layers_text(whole).empty());
  sequential blocks = sequential::from_layer_specs(tensor_parallel_specs(
      {"embedding:16:8", "block[residual[layernorm:8,attention:8:2],residual[layernorm:8,linear:8:32,gelu,linear:32:8]]",
       "block[residual[layernorm:8,attention:8:2],residual[layernorm:8,linear:8:32,gelu,linear:32:8]]", "linear:8:16"}));
  CHECK(split_layers_text(blocks) ==
        "1-2 block (head_parallel_attention:8:2, column_linear:8:32, row_linear:32:8)");
}

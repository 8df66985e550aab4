// The open layer-kind registry: user kinds plug into make_layer, blocks and Sequential; errors name the kind.
#include <doctest/doctest.h>

#include <algorithm>
#include <stdexcept>

#include "model/layer_registry.hpp"
#include "model/sequential.hpp"
#include "gradient_check.hpp"
#include "test_support.hpp"

using namespace ap;
using namespace ap::test;

namespace {

// y = factor * x: a user layer defined outside model/.
class scale final : public layer {
 public:
  explicit scale(float factor) : factor_(factor) {}
  std::string describe() const override { return "Scale(" + std::to_string(factor_) + ")"; }
  tensor forward(const tensor& x, layer_cache&, const forward_context&) const override {
    tensor y = x;
    for (float& v : y) v *= factor_;
    return y;
  }
  void backward_input(const tensor& dy, layer_cache&, tensor* dx) const override {
    if (!dx) return;
    float* pdx = accumulate_into(*dx, shape_of(dy), *this);
    for (std::size_t i = 0; i < dy.size(); ++i) pdx[i] += factor_ * dy.data()[i];
  }
  std::unique_ptr<layer> clone() const override { return std::make_unique<scale>(*this); }
  std::string spec() const override { return "test_scale:" + std::to_string(factor_); }

 private:
  float factor_;
};

const layer_kind_registration scale_kind{"test_scale", [](const layer_spec& s) {
                                           s.expect_fields(1, "test_scale:FACTOR");
                                           return std::make_unique<scale>(s.number(0));
                                         }};

}  // namespace

TEST_CASE("the built-in kinds are registered like user kinds, listed sorted") {
  const auto kinds = registered_layer_kinds();
  for (const char* k : {"block", "dropout", "gelu", "layernorm", "linear", "relu", "residual", "sigmoid", "sleep",
                        "tanh", "test_scale"})
    CHECK(std::find(kinds.begin(), kinds.end(), k) != kinds.end());
  CHECK(std::is_sorted(kinds.begin(), kinds.end()));
}

TEST_CASE("a user kind builds through make_layer, inside blocks and in a Sequential") {
  auto l = make_layer("test_scale:2");
  CHECK(l->describe() == "Scale(2.000000)");
  sequential m = sequential::from_layer_specs({"linear:3:4", "residual[test_scale:0.5,linear:4:4]", "test_scale:3"});
  m.initialize(1);
  CHECK(m.slice(1, 3).clone().layer_specs() == std::vector<std::string>{"residual[test_scale:0.500000,linear:4:4]",
                                                                       "test_scale:3.000000"});
  check_layer_gradients(*make_layer("residual[test_scale:0.5,linear:4:4]"), random_tensor({2, 4}, 2),
                        {true, 0, 0}, 3e-3f);
  CHECK(contains(error_of([] { make_layer("test_scale"); }), "bad layer spec 'test_scale': expected test_scale:FACTOR"));
}

TEST_CASE("registering a kind twice, or a bad name, is an error naming the kind") {
  const auto factory = [](const layer_spec&) -> std::unique_ptr<layer> { return nullptr; };
  CHECK_THROWS_WITH_AS(register_layer_kind("linear", factory), "layer kind 'linear' is registered twice", std::logic_error);
  CHECK_THROWS_WITH_AS(register_layer_kind("test_scale", factory), "layer kind 'test_scale' is registered twice",
                       std::logic_error);
  for (const char* bad : {"", "Scale", "my-layer", "a:b", "x[y]", "9lives"}) {
    const std::string what = error_of([&] { register_layer_kind(bad, factory); });
    INFO(std::string(bad) << ": " << what);
    CHECK(contains(what, std::string("cannot register layer kind '") + bad + "'"));
  }
}

TEST_CASE("an unknown kind names the kind and lists the known ones") {
  const std::string what = error_of([] { make_layer("conv:3"); });
  CHECK(contains(what, "bad layer spec 'conv:3': unknown layer kind 'conv' (known: attention, block, dropout, embedding, gelu"));
  CHECK(contains(what, "test_scale"));
  CHECK(contains(error_of([] { make_layer("residual[relu,conv:3]"); }), "unknown layer kind 'conv'"));
}

TEST_CASE("layer_kinds_in lists every kind a spec uses, parts included, once each") {
  CHECK(layer_kinds_in("linear:3:4") == std::vector<std::string>{"linear"});
  CHECK(layer_kinds_in("residual[test_scale:2,block[relu,linear:2:2],relu]") ==
        std::vector<std::string>{"residual", "test_scale", "block", "relu", "linear"});
}

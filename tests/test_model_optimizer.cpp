// Optimizers against updates computed by hand (in Python, float64) for one scalar weight.
#include <doctest/doctest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "model/linear.hpp"
#include "model/optimizer.hpp"
#include "tensor/compute.hpp"

using namespace ap;

namespace {

// One scalar parameter "0.weight" with value w and a gradient the test sets before each step.
struct scalar_param {
  tensor value, grad;
  explicit scalar_param(float w) : value(from_values({1}, {w})), grad(zeros({1})) {}
  std::vector<parameter> params() { return {{"0.weight", &value, &grad}}; }
  float w() const { return value(0); }
};

std::unique_ptr<optimizer> make(const std::string& kind, float lr, float momentum = 0, bool nesterov = false,
                                float weight_decay = 0) {
  optimizer_config c;
  c.kind = kind;
  c.lr = lr;
  c.momentum = momentum;
  c.nesterov = nesterov;
  c.weight_decay = weight_decay;
  return make_optimizer(c);
}

}  // namespace

TEST_CASE("SGD with momentum, two steps: v = 0.9 v + g, w -= lr v") {
  scalar_param p(1.0f);
  auto opt = make("sgd", 0.1f, 0.9f);
  CHECK(opt->state().empty());  // state is created at the first step
  p.grad(0) = 0.5f;
  opt->step(p.params());
  CHECK(p.w() == doctest::Approx(0.95));  // v = 0.5
  opt->step(p.params());
  CHECK(p.w() == doctest::Approx(0.855));  // v = 0.95
  REQUIRE(opt->state().count("0.weight.momentum") == 1);
  CHECK(opt->state()["0.weight.momentum"]->data()[0] == doctest::Approx(0.95));
  CHECK(opt->steps() == 2);
}

TEST_CASE("SGD variants: Nesterov, weight decay, plain") {
  scalar_param n(1.0f);
  auto nesterov = make("sgd", 0.1f, 0.9f, true);
  n.grad(0) = 0.5f;
  nesterov->step(n.params());
  CHECK(n.w() == doctest::Approx(0.905));  // update g + 0.9 v = 0.95
  nesterov->step(n.params());
  CHECK(n.w() == doctest::Approx(0.7695));  // v = 0.95, update 0.5 + 0.855

  scalar_param d(1.0f);
  auto decay = make("sgd", 0.1f, 0.0f, false, 0.1f);
  d.grad(0) = 0.5f;
  decay->step(d.params());
  CHECK(d.w() == doctest::Approx(0.94));  // g + 0.1 w = 0.6
  decay->step(d.params());
  CHECK(d.w() == doctest::Approx(0.8806));  // g + 0.1 w = 0.594
  CHECK(decay->state().empty());  // no momentum, no state
}

TEST_CASE("Adam, first two steps, bias-corrected") {
  scalar_param p(1.0f);
  auto opt = make("adam", 0.1f);
  p.grad(0) = 0.5f;
  opt->step(p.params());
  CHECK(p.w() == doctest::Approx(0.900000002).epsilon(1e-6));  // the first step moves by lr
  p.grad(0) = -0.25f;
  opt->step(p.params());
  CHECK(p.w() == doctest::Approx(0.8733662987).epsilon(1e-6));
  auto state = opt->state();
  REQUIRE(state.size() == 2);
  CHECK(state["0.weight.m"]->data()[0] == doctest::Approx(0.02));
  CHECK(state["0.weight.v"]->data()[0] == doctest::Approx(0.00031225));
  CHECK(opt->steps() == 2);
}

TEST_CASE("AdamW decays the weights directly, Adam adds the decay to the gradient") {
  scalar_param decoupled(2.0f), coupled(2.0f);
  make("adamw", 0.1f, 0, false, 0.1f)->step(decoupled.params());
  make("adam", 0.1f, 0, false, 0.1f)->step(coupled.params());
  CHECK(decoupled.w() == doctest::Approx(1.98));  // zero gradient: only w -= lr * wd * w
  CHECK(coupled.w() == doctest::Approx(1.9));     // gradient 0.1 * w, normalised to a step of lr

  scalar_param moving(1.0f);
  moving.grad(0) = 0.5f;
  make("adamw", 0.1f, 0, false, 0.1f)->step(moving.params());
  CHECK(moving.w() == doctest::Approx(0.890000002).epsilon(1e-6));  // 1 * (1 - 0.01) - 0.1
}

TEST_CASE("state is kept per parameter name, for every parameter of a layer") {
  linear l(3, 2);
  l.initialize(1);
  auto opt = make("adam", 1e-3f);
  for (const parameter& p : l.parameters("4.")) std::fill(p.grad->begin(), p.grad->end(), 1.0f);
  const tensor before = *l.parameters("4.")[0].value;
  opt->step(l.parameters("4."));
  auto state = opt->state();
  for (const char* key : {"4.weight.m", "4.weight.v", "4.bias.m", "4.bias.v"}) {
    CAPTURE(key);
    REQUIRE(state.count(key) == 1);
  }
  CHECK(state["4.weight.m"]->shape() == before.shape());
  CHECK(*l.parameters("4.")[0].value != before);
}

TEST_CASE("make_optimizer refuses bad settings, naming the value") {
  CHECK_THROWS_WITH_AS(make("rmsprop", 0.1f), "unknown optimizer 'rmsprop': expected sgd, adam or adamw",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(make("adam", 0.0f), "optimizer: learning rate 0 is not a positive number",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(make("sgd", -0.5f), "optimizer: learning rate -0.5 is not a positive number",
                       std::invalid_argument);
  CHECK_THROWS_AS(make("sgd", 0.1f, 1.5f), std::invalid_argument);
  CHECK_THROWS_AS(make("sgd", 0.1f, 0.0f, true), std::invalid_argument);
  CHECK_NOTHROW(make("adamw", 0.1f));
}

TEST_CASE("optimizer steps give the same bits on one and on two compute threads (Note [parallel element loops])") {
  const std::size_t n = 3 * static_cast<std::size_t>(parallel_elements) + 17;  // parallel, with a ragged end
  for (const char* kind : {"adam", "adamw", "sgd"}) {
    CAPTURE(kind);
    tensor results[2];
    for (int threads : {1, 2}) {
      set_compute_threads(threads);
      tensor value = zeros({n}), grad = zeros({n});
      for (std::size_t i = 0; i < n; ++i) {
        value.data()[i] = 0.001f * static_cast<float>(i % 1000) - 0.5f;
        grad.data()[i] = 0.01f * static_cast<float>((i * 7919) % 201) - 1.0f;
      }
      auto opt = make(kind, 0.01f, std::string(kind) == "sgd" ? 0.9f : 0.0f, false, 0.01f);
      for (int step = 0; step < 3; ++step) opt->step({{"0.weight", &value, &grad}});
      results[threads - 1] = value;
    }
    set_compute_threads(1);
    CHECK(results[0] == results[1]);  // bitwise
  }
}

TEST_CASE("three optimizers each stepping one part give, together, one optimizer's step bit for bit (Note [shared optimizer step])") {
  const std::size_t n = 1001;  // parts [0, 334), [334, 668), [668, 1001) (shard_rows)
  const auto owner = [](std::size_t i) -> std::size_t { return i < 334 ? 0 : i < 668 ? 1 : 2; };
  tensor start = zeros({n});
  for (std::size_t i = 0; i < n; ++i) start.data()[i] = 0.001f * static_cast<float>(i % 1000) - 0.5f;
  const auto gradient = [&](int step) {
    tensor g = zeros({n});
    for (std::size_t i = 0; i < n; ++i) g.data()[i] = 0.01f * static_cast<float>((i * 7919 + step * 31) % 201) - 1.0f;
    return g;
  };
  for (const char* kind : {"adam", "adamw", "sgd"}) {
    CAPTURE(kind);
    const float momentum = std::string(kind) == "sgd" ? 0.9f : 0.0f;
    tensor whole = start;
    auto one = make(kind, 0.01f, momentum, false, 0.01f);
    std::vector<tensor> values(3, start);
    std::vector<std::unique_ptr<optimizer>> parts;
    for (int d = 0; d < 3; ++d) parts.push_back(make(kind, 0.01f, momentum, false, 0.01f));
    for (int step = 0; step < 3; ++step) {
      tensor g = gradient(step);
      one->step({{"0.weight", &whole, &g}});
      for (std::size_t d = 0; d < 3; ++d) {
        tensor mine = gradient(step);
        parts[d]->step_part({{"0.weight", &values[d], &mine}}, d, 3);
      }
      const std::vector<tensor> updated = values;  // every copy takes the others' parts, as take_parts does
      for (std::size_t d = 0; d < 3; ++d)
        for (std::size_t i = 0; i < n; ++i) values[d].data()[i] = updated[owner(i)].data()[i];
      for (std::size_t d = 0; d < 3; ++d) CHECK(values[d] == whole);  // bitwise
      CHECK(parts[0]->steps() == one->steps());
    }
    // Each part's state is the whole optimizer's state there, and untouched (zero) elsewhere.
    for (const auto& [key, t] : one->state()) {
      CAPTURE(key);
      for (std::size_t d = 0; d < 3; ++d) {
        const tensor& mine = *parts[d]->state().at(key);
        bool right = true;
        for (std::size_t i = 0; i < n; ++i)
          right = right && mine.data()[i] == (owner(i) == d ? t->data()[i] : 0.0f);
        CHECK(right);
      }
    }
  }
}

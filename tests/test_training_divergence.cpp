// Training stops, naming the step, at a loss that is not finite or far above the first one (Note [divergence]).
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <stdexcept>
#include <vector>

#include "pipeline_test_models.hpp"
#include "test_support.hpp"
#include "training/trainer.hpp"

using namespace ap;

namespace {

// Returns the scripted losses, one per step, and counts its steps.
class scripted_runner final : public step_runner {
 public:
  explicit scripted_runner(std::vector<double> losses) : losses_(std::move(losses)) {}
  float train_step(const tensor&, const tensor&, std::uint64_t step) override {
    ++steps;
    return static_cast<float>(losses_.at(static_cast<std::size_t>(step) % losses_.size()));
  }
  tensor predict(const tensor& inputs) override { return zeros({rows(inputs), 4}); }
  int steps = 0;

 private:
  std::vector<double> losses_;
};

// 48 samples in batches of 10, three epochs: 15 steps.
train_report run(scripted_runner& r, double factor = 1000.0) {
  train_config c = test::small_train_config();
  c.divergence_factor = factor;
  return train(r, test::small_blobs(48), dataset{}, c);
}

}  // namespace

TEST_CASE("loss_problem: not finite always, above factor * max(first, 1) when the factor is set") {
  CHECK(loss_problem(2.0, 2.3, 1000).empty());
  CHECK(loss_problem(2299.0, 2.3, 1000).empty());
  CHECK(test::contains(loss_problem(2301.0, 2.3, 1000), "exceeds 1000 times the first step's loss 2.3"));
  CHECK(loss_problem(999.0, 0.05, 1000).empty());  // the floor of 1: a well-trained start is not held to 50
  CHECK(!loss_problem(1001.0, 0.05, 1000).empty());
  CHECK(loss_problem(1e30, 2.3, 0).empty());  // 0: never on size
  CHECK(test::contains(loss_problem(std::nan(""), 2.3, 0), "not finite (nan)"));
  CHECK(test::contains(loss_problem(std::numeric_limits<double>::infinity(), 2.3, 1000), "not finite (inf)"));
  // A pipeline's microbatches: the largest (or a non-finite one) is named.
  CHECK(test::contains(loss_problem(5000.0, 2.3, 1000, {1.0f, 9000.0f, 2.0f}),
                       "(floor 1) (largest in microbatch 1: 9000): the training diverges"));
  CHECK(test::contains(loss_problem(std::nan(""), 2.3, 1000, {1.0f, 2.0f, std::nanf("")}),
                       "(largest in microbatch 2: nan)"));
}

TEST_CASE("train stops at the first diverging step and names it, normal losses run to the end") {
  scripted_runner calm({2.3, 2.0, 1.5, 1.0, 0.8, 3.0});
  CHECK(run(calm).steps == 15);

  scripted_runner exploding({2.3, 2.0, 50.0, 4e9});  // step 3: 4e9 > 2300
  const std::string error = test::error_of([&] { run(exploding); });
  CHECK(test::contains(error, "step 3: the loss 4e+09 exceeds 1000 times"));
  CHECK(exploding.steps == 4);  // stopped there

  scripted_runner off({2.3, 4e9});
  CHECK(run(off, 0.0).steps == 15);

  scripted_runner nan_loss({2.3, 2.0, std::nan("")});
  CHECK(test::contains(test::error_of([&] { run(nan_loss, 0.0); }), "step 2: the loss is not finite (nan)"));
}

TEST_CASE("single process: a loss that is not finite names the step") {
  sequential model;  // one Linear: a NaN input reaches the loss (a ReLU would turn it into 0)
  model.add(make_layer("linear:12:4"));
  optimizer_config sgd;
  sgd.kind = "sgd";
  sgd.lr = 0.01f;
  local_runner runner(model, sgd);
  const dataset d = test::small_blobs(8);
  tensor inputs = d.inputs;
  inputs.data()[3] = std::numeric_limits<float>::quiet_NaN();
  const std::string error = test::error_of([&] { runner.train_step(inputs, d.labels, 7); });
  INFO(error);
  CHECK(test::contains(error, "step 7: cross_entropy: row 0 of the output holds nan"));
}

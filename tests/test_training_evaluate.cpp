// Evaluation in batches: the validation loss and the test accuracy of a data set predicted batch by batch
// (a last partial batch included) equal the one-batch result, and train() evaluates in batches of its
// training batch size, so the memory of an evaluation does not grow with the size of the test set.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "data/synthetic.hpp"
#include "data/text_corpus.hpp"
#include "pipeline_test_models.hpp"
#include "test_support.hpp"
#include "training/trainer.hpp"

using namespace ap;

namespace {

// 10 windows of 8 bytes: batches of 4 leave a last one of 2, batches of 3 a last one of 1.
dataset text_set() {
  const std::string text = "It is a truth universally acknowledged, that a single man in possession of a good fortune, "
                           "must be in want of a wife.";
  return text_windows_in_order(std::vector<std::uint8_t>(text.begin(), text.end()), 8, 10, "text");
}

bool close_relative(double a, double b, double tolerance) {
  return std::abs(a - b) <= tolerance * std::max(std::abs(a), std::abs(b));
}

// A runner that trains nothing and predicts zeros, recording the rows of every predict call.
class recording_runner final : public step_runner {
 public:
  float train_step(const tensor&, const tensor&, std::uint64_t) override { return 1.0f; }
  tensor predict(const tensor& inputs) override {
    predicted_rows.push_back(rows(inputs));
    return zeros({rows(inputs), 4});
  }
  std::vector<std::size_t> predicted_rows;
};

}  // namespace

TEST_CASE("a GPT's validation loss and accuracy in batches equal the one-batch result, a last partial batch included") {
  const dataset d = text_set();
  REQUIRE(d.size() == 10);
  sequential model = sequential::from_spec("gpt:layers=2,dim=16,heads=2,context=8", sequential_options{"relu", 7});
  local_runner runner(model, test::adam_optimizer());
  const double whole_loss = evaluate_loss(runner, d, d.size());
  const double whole_accuracy = evaluate_accuracy(runner, d, d.size());
  CHECK(whole_loss > 0.0);
  for (std::size_t batch_size : {1, 3, 4, 9}) {
    CAPTURE(batch_size);
    CHECK(close_relative(evaluate_loss(runner, d, batch_size), whole_loss, 1e-6));
    CHECK(evaluate_accuracy(runner, d, batch_size) == whole_accuracy);
  }
}

TEST_CASE("an MLP's test accuracy and loss in batches equal the one-batch result") {
  const dataset d = make_blobs(23, 12, 4, 3);
  sequential model = sequential::from_spec("12-16-4", sequential_options{"relu", 7});
  local_runner runner(model, test::adam_optimizer());
  const double whole_loss = evaluate_loss(runner, d, d.size());
  const double whole_accuracy = evaluate_accuracy(runner, d, d.size());
  for (std::size_t batch_size : {5, 10, 22}) {
    CAPTURE(batch_size);
    CHECK(close_relative(evaluate_loss(runner, d, batch_size), whole_loss, 1e-6));
    CHECK(evaluate_accuracy(runner, d, batch_size) == whole_accuracy);
  }
}

TEST_CASE("train() tests in batches of its training batch size") {
  recording_runner runner;
  train_config c = test::small_train_config();  // batches of 10
  c.epochs = 1;
  train(runner, test::small_blobs(20), test::small_blobs(25), c);
  CHECK(runner.predicted_rows == std::vector<std::size_t>{10, 10, 5});
}

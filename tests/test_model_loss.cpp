// Losses: hand-computed values, finite differences, and the microbatch scaling of Note [loss scaling].
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <stdexcept>

#include "model/loss.hpp"
#include "random/seeded_random.hpp"
#include "tensor/fast_exp.hpp"
#include "test_support.hpp"

using namespace ap;

namespace {

using namespace ap::test;

// Largest |a - e| over all elements; shapes must agree.
double max_abs_difference(const tensor& a, const tensor& e) {
  REQUIRE(a.shape() == e.shape());
  double worst = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i)
    worst = std::max(worst, std::fabs(double(a.data()[i]) - double(e.data()[i])));
  return worst;
}

// Central differences of the loss itself w.r.t. every output element.
tensor numeric_gradient(const loss& l, tensor output, const tensor& target) {
  tensor grad = tensor::from_shape(output.shape());
  const float eps = 1e-2f;
  for (std::size_t i = 0; i < output.size(); ++i) {
    const float saved = output.data()[i];
    output.data()[i] = saved + eps;
    const double plus = l.compute_loss(output, target);
    output.data()[i] = saved - eps;
    const double minus = l.compute_loss(output, target);
    output.data()[i] = saved;
    grad.data()[i] = static_cast<float>((plus - minus) / (2.0 * eps));
  }
  return grad;
}

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no exception)";
}

const tensor labels = from_values({6}, {0, 3, 1, 4, 2, 0});

}  // namespace

TEST_CASE("cross-entropy of a tiny case, by hand") {
  softmax_cross_entropy ce;
  // Row 0: log(e^1 + e^2 + e^3) - 3 = 0.40760596; row 1: log(3) - 0 = 1.0986123 (equal logits).
  const tensor output = from_values({2, 3}, {1, 2, 3, 5, 5, 5});
  const tensor target = from_values({2}, {2, 1});
  CHECK(ce.compute_loss(output, target) == doctest::Approx((0.40760596 + 1.0986123) / 2).epsilon(1e-6));
  const tensor g = ce.compute_gradient(output, target);
  // softmax(1, 2, 3) = (0.09003057, 0.24472847, 0.66524096); minus the one-hot, over the batch of 2.
  CHECK(g(0, 0) == doctest::Approx(0.09003057 / 2).epsilon(1e-6));
  CHECK(g(0, 2) == doctest::Approx((0.66524096 - 1) / 2).epsilon(1e-6));
  CHECK(g(1, 1) == doctest::Approx((1.0 / 3 - 1) / 2).epsilon(1e-6));
  CHECK(count_correct(output, target) == 1);  // row 0 predicts 2; row 1 ties, arg-max takes the first
}

TEST_CASE("the softmaxes' exp is within 2 ulp of exp on [-87, 0], 0-like below, NaN for NaN") {
  // Every x of a fine grid, and the ends (Note [fast exp]).
  double worst = 0.0;
  for (int i = 0; i <= 870000; ++i) {
    const float x = -static_cast<float>(i) * 1e-4f;
    const double want = std::exp(double(x));
    worst = std::max(worst, std::abs(double(exp_nonpositive(x)) - want) / want);
  }
  CHECK(worst < 2.4e-7);  // 2 ulp of a float
  CHECK(exp_nonpositive(0.0f) == 1.0f);
  CHECK(exp_nonpositive(-1000.0f) < 1e-37f);
  CHECK(exp_nonpositive(-1000.0f) >= 0.0f);
  CHECK(std::isnan(exp_nonpositive(std::numeric_limits<float>::quiet_NaN())));  // passed on, never undefined
}

TEST_CASE("cross-entropy stays finite for huge logits") {
  softmax_cross_entropy ce;
  const tensor output = from_values({1, 2}, {1000, 0});
  CHECK(ce.compute_loss(output, from_values({1}, {1})) == doctest::Approx(1000.0));
  CHECK(ce.compute_loss(output, from_values({1}, {0})) == doctest::Approx(0.0));
}

TEST_CASE("mean squared error by hand: squared errors over batch * features") {
  mean_squared_error mse;
  const tensor output = from_values({2, 2}, {1, 2, 3, 4});
  const tensor target = from_values({2, 2}, {0, 2, 3, 1});
  CHECK(mse.compute_loss(output, target) == doctest::Approx((1.0 + 9.0) / 4));
  CHECK(mse.compute_gradient(output, target) == from_values({2, 2}, {0.5f, 0, 0, 1.5f}));
}

TEST_CASE("finite differences: both losses w.r.t. the output") {
  softmax_cross_entropy ce;
  const tensor logits = test::random_tensor({6, 5}, 1, 3.0f);
  CHECK(max_abs_difference(ce.compute_gradient(logits, labels), numeric_gradient(ce, logits, labels)) < 1e-4);
  mean_squared_error mse;
  const tensor target = test::random_tensor({6, 5}, 2);
  CHECK(max_abs_difference(mse.compute_gradient(logits, target), numeric_gradient(mse, logits, target)) < 1e-4);
}

TEST_CASE("unequal microbatches scaled by the whole batch sum to the full-batch loss and gradient") {
  const tensor output = random_tensor({6, 5}, 3, 2.0f);
  const tensor regression = random_tensor({6, 5}, 4);
  for (const char* name : {"cross_entropy", "mse"}) {
    CAPTURE(name);
    const auto l = make_loss(name);
    const tensor& target = std::string(name) == "mse" ? regression : labels;
    const float full = l->compute_loss(output, target);
    const tensor full_grad = l->compute_gradient(output, target);
    float sum = 0.0f;
    tensor grad = tensor::from_shape(output.shape());
    for (auto [begin, end] : {std::pair<std::size_t, std::size_t>{0, 1}, {1, 4}, {4, 6}}) {
      const tensor o = slice_rows(output, begin, end), t = slice_rows(target, begin, end);
      sum += l->compute_loss(o, t, 6);
      const tensor g = l->compute_gradient(o, t, 6);
      std::copy(g.begin(), g.end(), grad.data() + begin * 5);
    }
    CHECK(std::fabs(sum - full) < 1e-6);
    CHECK(max_abs_difference(grad, full_grad) < 1e-6);
  }
}

TEST_CASE("bad labels, shapes and NaNs throw naming the row or the shapes") {
  softmax_cross_entropy ce;
  const tensor output = random_tensor({3, 4}, 5);
  CHECK(message_of([&] { ce.compute_loss(output, from_values({3}, {0, 4, 1})); }) ==
        "row 1 has label 4, not a class index in [0, 4)");
  CHECK(message_of([&] { ce.compute_gradient(output, from_values({3}, {0, 1, -1})); }) ==
        "row 2 has label -1, not a class index in [0, 4)");
  CHECK(message_of([&] { ce.compute_loss(output, from_values({3}, {0.5f, 1, 1})); }).find("row 0") !=
        std::string::npos);
  CHECK_THROWS_AS(ce.compute_loss(output, from_values({3}, {0, 4, 1})), std::invalid_argument);

  const std::string shapes = message_of([&] { ce.compute_loss(output, from_values({2}, {0, 1})); });
  CHECK(shapes.find("(3, 4)") != std::string::npos);
  CHECK(shapes.find("(2)") != std::string::npos);
  mean_squared_error mse;
  CHECK_THROWS_WITH_AS(mse.compute_loss(output, zeros({3, 5})),
                       "mse: output (3, 4) and target (3, 5) differ in shape", std::invalid_argument);

  tensor broken = output;
  broken(2, 1) = std::numeric_limits<float>::quiet_NaN();
  CHECK_THROWS_AS(ce.compute_loss(broken, from_values({3}, {0, 1, 2})), std::domain_error);
  CHECK(message_of([&] { ce.compute_gradient(broken, from_values({3}, {0, 1, 2})); }).find("row 2") !=
        std::string::npos);
  CHECK_THROWS_AS(mse.compute_loss(broken, zeros({3, 4})), std::domain_error);
  CHECK(message_of([&] { mse.compute_loss(broken, zeros({3, 4})); }).find("row 2") != std::string::npos);
  broken(2, 1) = std::numeric_limits<float>::infinity();
  CHECK(message_of([&] { ce.compute_loss(broken, from_values({3}, {0, 1, 2})); }).find("row 2") !=
        std::string::npos);
}

TEST_CASE("make_loss and count_correct") {
  CHECK(make_loss("cross_entropy")->name() == "cross_entropy");
  CHECK(make_loss("mse")->name() == "mse");
  CHECK_THROWS_WITH_AS(make_loss("hinge"), doctest::Contains("unknown loss 'hinge': registered losses are "),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(make_loss("hinge"), doctest::Contains("cross_entropy, "), std::invalid_argument);
  const tensor output = from_values({3, 3}, {0, 9, 1, 5, 1, 2, 0, 0, 3});
  CHECK(count_correct(output, from_values({3}, {1, 0, 2})) == 3);
  CHECK(count_correct(output, from_values({3}, {1, 2, 0})) == 1);
}

TEST_CASE("losses refuse a bfloat16 output or target, naming the dtype and the shape") {
  const mean_squared_error mse;
  const softmax_cross_entropy ce;
  const tensor output = zeros({3, 4});
  CHECK_THROWS_WITH_AS(mse.compute_loss(output.astype(dtype::bfloat16), output),
                       "mse takes a float32 output, got bfloat16 (3, 4)", std::invalid_argument);
  CHECK_THROWS_WITH_AS(mse.compute_gradient(output, output.astype(dtype::bfloat16)),
                       "mse takes a float32 target, got bfloat16 (3, 4)", std::invalid_argument);
  const tensor labels = from_values({3}, {0, 1, 2});
  CHECK_THROWS_WITH_AS(ce.compute_loss(output.astype(dtype::bfloat16), labels),
                       "cross_entropy takes a float32 output, got bfloat16 (3, 4)", std::invalid_argument);
  CHECK_THROWS_WITH_AS(ce.compute_gradient(output.astype(dtype::bfloat16), labels),
                       "cross_entropy takes a float32 output, got bfloat16 (3, 4)", std::invalid_argument);
}

TEST_CASE("mse on rank 3: every (sample, position) is a row, the gradient keeps the shape, microbatches sum to the batch") {
  const mean_squared_error mse;
  std::vector<float> o(2 * 3 * 4), t(2 * 3 * 4);
  for (std::size_t i = 0; i < o.size(); ++i) o[i] = 0.1f * float(i), t[i] = 0.05f * float(i * i % 7);
  const tensor output = from_values({2, 3, 4}, o), target = from_values({2, 3, 4}, t);
  double sum = 0.0;
  for (std::size_t i = 0; i < o.size(); ++i) sum += double(o[i] - t[i]) * double(o[i] - t[i]);
  CHECK(mse.compute_loss(output, target) == doctest::Approx(sum / double(o.size())).epsilon(1e-6));
  const tensor grad = mse.compute_gradient(output, target);
  CHECK(shape_of(grad) == shape_t{2, 3, 4});
  for (std::size_t i = 0; i < o.size(); ++i)
    CHECK(grad.data()[i] == doctest::Approx(2.0 * (o[i] - t[i]) / double(o.size())).epsilon(1e-6));
  // The microbatches' losses, each divided by the whole batch, sum to the batch's (Note [loss scaling]).
  // The pipeline passes the batch's rows (every leading axis) as batch_size.
  const std::size_t batch_rows = rows(output);
  const float parts = mse.compute_loss(slice_rows(output, 0, 1), slice_rows(target, 0, 1), batch_rows) +
                      mse.compute_loss(slice_rows(output, 1, 2), slice_rows(target, 1, 2), batch_rows);
  CHECK(parts == doctest::Approx(mse.compute_loss(output, target)).epsilon(1e-6));
}

namespace {

// A user's loss (Note [the user's loss]): half the mean squared error, on the interface the built-in ones use.
class half_mse final : public loss {
 public:
  std::string name() const override { return "test_half_mse"; }
  float compute_loss(const tensor& output, const tensor& target, std::size_t batch_size = 0) const override {
    return 0.5f * mse_.compute_loss(output, target, batch_size);
  }
  tensor compute_gradient(const tensor& output, const tensor& target, std::size_t batch_size = 0) const override {
    tensor g = mse_.compute_gradient(output, target, batch_size);
    for (float& v : g) v *= 0.5f;
    return g;
  }
  std::size_t batch_rows(const tensor& target) const override { return rows(target); }

 private:
  mean_squared_error mse_;
};

const loss_registration half_mse_registration{"test_half_mse", [] { return std::make_unique<half_mse>(); }};

}  // namespace

TEST_CASE("a user's loss registers a name that make_loss builds, a name twice or a bad name is refused") {
  const auto names = registered_losses();
  CHECK(std::find(names.begin(), names.end(), "test_half_mse") != names.end());
  CHECK(std::find(names.begin(), names.end(), "cross_entropy") != names.end());
  const auto made = make_loss("test_half_mse");
  REQUIRE(made);
  const tensor output = from_values({2, 2}, {1, 2, 3, 4}), target = from_values({2, 2}, {0, 2, 3, 2});
  CHECK(made->compute_loss(output, target) == doctest::Approx(0.5f * mean_squared_error{}.compute_loss(output, target)));
  CHECK_THROWS_WITH_AS(register_loss("test_half_mse", [] { return std::make_unique<half_mse>(); }),
                       "loss 'test_half_mse' is registered twice", std::logic_error);
  CHECK_THROWS_WITH_AS(register_loss("Half MSE", [] { return std::make_unique<half_mse>(); }),
                       doctest::Contains("loss name 'Half MSE' is not lower-case"), std::logic_error);
  CHECK_THROWS_AS(register_loss("empty_factory", nullptr), std::logic_error);
}

TEST_CASE("take_loss_and_gradient: the same bits as compute_loss_and_gradient, the gradient written over the output's memory") {
  softmax_cross_entropy ce;
  tensor logits = test::random_tensor({2, 5, 300}, 4, 3.0f);  // a language model's (batch, sequence, vocabulary)
  tensor labels = tensor::from_shape({2, 5});
  for (std::size_t i = 0; i < labels.size(); ++i) labels.data()[i] = float((i * 37) % 300);
  const loss::loss_and_gradient copied = ce.compute_loss_and_gradient(logits, labels, 40);
  tensor given = logits;
  const float* memory = given.data();
  loss::loss_and_gradient taken = ce.take_loss_and_gradient(std::move(given), labels, 40);
  CHECK(taken.loss == copied.loss);
  CHECK(taken.gradient.data() == memory);  // no second buffer of logits' size
  CHECK(shape_of(taken.gradient) == shape_of(copied.gradient));
  CHECK(std::equal(copied.gradient.begin(), copied.gradient.end(), taken.gradient.begin()));
  // mse keeps the default: a copy, the same values.
  mean_squared_error mse;
  tensor target = test::random_tensor({4, 3}, 5);
  tensor out = test::random_tensor({4, 3}, 6);
  const auto expected = mse.compute_loss_and_gradient(out, target);
  const auto got = mse.take_loss_and_gradient(tensor(out), target);
  CHECK(got.loss == expected.loss);
  CHECK(std::equal(expected.gradient.begin(), expected.gradient.end(), got.gradient.begin()));
}

// Learning-rate schedules against values computed by hand (float64, PyTorch's and nanoGPT's formulas), their
// refusals, and the optimizers taking each update's lr from their own step count.
#include <doctest/doctest.h>

#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "equivalence.hpp"
#include "model/lr_schedule.hpp"
#include "model/optimizer.hpp"
#include "tensor/compute.hpp"

using namespace ap;

namespace {

optimizer_config with_schedule(float lr, const std::string& kind, std::uint64_t warmup, std::uint64_t decay = 0,
                               float min_lr = 0.0f) {
  optimizer_config c;
  c.kind = "sgd";
  c.lr = lr;
  c.schedule.kind = kind;
  c.schedule.warmup_steps = warmup;
  c.schedule.decay_steps = decay;
  c.schedule.min_lr = min_lr;
  return c;
}

void check_lr(const optimizer_config& c, std::uint64_t step, double expected) {
  INFO(c.schedule.kind << " at step " << step);
  CHECK(lr_at(c, step) == doctest::Approx(expected).epsilon(1e-6));
}

// One scalar parameter with gradient 1 at every step.
struct scalar_param {
  tensor value = from_values({1}, {1.0f}), grad = from_values({1}, {1.0f});
  std::vector<parameter> params() { return {{"0.weight", &value, &grad}}; }
};

}  // namespace

TEST_CASE("constant: the lr itself, bit for bit, after a warmup of lr * (s + 1) / W") {
  optimizer_config plain;
  plain.lr = 0.0123f;
  for (std::uint64_t s : {0u, 1u, 1000000u}) CHECK(lr_at(plain, s) == plain.lr);
  const optimizer_config c = with_schedule(0.2f, "constant", 4);
  check_lr(c, 0, 0.05);
  check_lr(c, 1, 0.1);
  check_lr(c, 3, 0.2);  // the warmup's last step reaches lr
  CHECK(lr_at(c, 4) == 0.2f);
  CHECK(lr_at(c, 100) == 0.2f);
}

TEST_CASE("cosine: warmup, half-cosine from lr to min_lr over warmup..decay_steps, then min_lr") {
  const optimizer_config c = with_schedule(0.1f, "cosine", 10, 110, 0.01f);
  check_lr(c, 0, 0.01);
  check_lr(c, 9, 0.1);
  check_lr(c, 10, 0.1);                 // progress 0
  check_lr(c, 35, 0.0868198052);        // progress 0.25: 0.01 + 0.5 (1 + cos(pi/4)) 0.09
  check_lr(c, 60, 0.055);               // progress 0.5
  check_lr(c, 109, 0.0100222048);       // progress 0.99
  check_lr(c, 110, 0.01);               // the end of the decay
  check_lr(c, 5000, 0.01);              // after it
  // Without warmup the first update runs at lr.
  const optimizer_config no_warmup = with_schedule(0.1f, "cosine", 0, 4, 0.0f);
  check_lr(no_warmup, 0, 0.1);
  check_lr(no_warmup, 1, 0.0853553391);  // 0.5 (1 + cos(pi/4)) 0.1
  check_lr(no_warmup, 2, 0.05);
  CHECK(lr_at(no_warmup, 4) == 0.0f);
}

TEST_CASE("linear: warmup, a straight line from lr to min_lr, then min_lr") {
  const optimizer_config c = with_schedule(0.1f, "linear", 10, 110, 0.01f);
  check_lr(c, 4, 0.05);
  check_lr(c, 10, 0.1);
  check_lr(c, 35, 0.0775);
  check_lr(c, 60, 0.055);
  check_lr(c, 109, 0.0109);
  check_lr(c, 110, 0.01);
  check_lr(c, 111, 0.01);
}

TEST_CASE("step: lr x gamma every step_size updates, counted from the warmup's end") {
  optimizer_config c = with_schedule(0.1f, "step", 2);
  c.schedule.step_size = 3;
  c.schedule.gamma = 0.5f;
  const double expected[] = {0.05, 0.1, 0.1, 0.1, 0.1, 0.05, 0.05, 0.05, 0.025, 0.025, 0.025, 0.0125};
  for (std::uint64_t s = 0; s < 12; ++s) check_lr(c, s, expected[s]);
}

TEST_CASE("check_lr_schedule refuses a bad schedule, naming the setting and its value") {
  using test::check_refused;
  check_refused([] { check_lr_schedule(with_schedule(0.1f, "cosin", 0, 10)); }, {"lr schedule", "kind 'cosin'"});
  check_refused([] { check_lr_schedule(with_schedule(0.1f, "cosine", 0, 10, 0.5f)); }, {"lr schedule", "min_lr 0.5"});
  check_refused([] { check_lr_schedule(with_schedule(0.1f, "constant", 0, 0, 0.5f)); }, {"min_lr 0.5"});
  check_refused([] { check_lr_schedule(with_schedule(0.1f, "linear", 0, 10, -0.01f)); }, {"min_lr -0.01"});
  check_refused([] { check_lr_schedule(with_schedule(0.1f, "cosine", 0)); }, {"decay_steps 0", "cosine"});
  check_refused([] { check_lr_schedule(with_schedule(0.1f, "linear", 10, 10)); }, {"decay_steps 10", "warmup_steps 10"});
  check_refused([] { check_lr_schedule(with_schedule(0.1f, "step", 0)); }, {"step_size 0"});
  check_refused(
      [] {
        optimizer_config c = with_schedule(0.1f, "step", 0);
        c.schedule.step_size = 5;
        c.schedule.gamma = 0.0f;
        check_lr_schedule(c);
      },
      {"gamma 0"});
  CHECK(test::check_refused([] { check_lr_schedule(with_schedule(0.1f, "constant", 500), 200); }, {}) ==
        "lr schedule: warmup_steps 500 is longer than the run (200 steps)");
  // A decay past the run's end is a run stopped early (to be resumed), not an error.
  CHECK_NOTHROW(check_lr_schedule(with_schedule(0.1f, "cosine", 10, 300), 200));
  // The run's length unknown (0), or long enough: accepted.
  CHECK_NOTHROW(check_lr_schedule(with_schedule(0.1f, "cosine", 500, 1000), 0));
  CHECK_NOTHROW(check_lr_schedule(with_schedule(0.1f, "cosine", 10, 200), 200));
  // make_optimizer refuses it too, before any update.
  check_refused([] { make_optimizer(with_schedule(0.1f, "cosine", 5)); }, {"lr schedule", "decay_steps 0"});
}

TEST_CASE("every optimizer updates with lr_at of its own step count, which set_steps restores") {
  // SGD: w -= lr_at(s) g, g = 1.
  const optimizer_config c = with_schedule(0.3f, "cosine", 3, 6, 0.03f);
  scalar_param p;
  auto sgd = make_optimizer(c);
  float expected = 1.0f;
  for (std::uint64_t s = 0; s < 8; ++s) {
    sgd->step(p.params());
    expected -= lr_at(c, s);
    CHECK(p.value(0) == expected);  // the same float operations
  }
  CHECK(lr_at(c, 1) == doctest::Approx(0.2));  // a warmup step, not the lr
  // Resumed at step 4 (as a checkpoint restores it): the update runs at lr_at(4).
  scalar_param q;
  auto resumed = make_optimizer(c);
  resumed->set_steps(4);
  resumed->step(q.params());
  CHECK(q.value(0) == 1.0f - lr_at(c, 4));
  // Adam's and AdamW's first update moves w by about lr_at(0) (m_hat / sqrt(v_hat) = 1), and AdamW's decay
  // shrinks w by lr_at(0) * weight_decay.
  for (const std::string kind : {"adam", "adamw"}) {
    optimizer_config a = with_schedule(0.4f, "linear", 4, 8, 0.0f);
    a.kind = kind;
    a.weight_decay = kind == "adamw" ? 0.5f : 0.0f;
    scalar_param r;
    make_optimizer(a)->step(r.params());
    const double shrink = kind == "adamw" ? 1.0 - 0.1 * 0.5 : 1.0;
    INFO(kind);
    CHECK(r.value(0) == doctest::Approx(shrink - 0.1).epsilon(1e-5));
  }
}

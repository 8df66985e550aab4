// What a run shows while and after it trains: the per-step hook (progress line, loss curve), the last epoch's
// mean named with its step count, the last step's loss, and the loss curve as SVG.
#include <doctest/doctest.h>

#include "pipeline_test_models.hpp"
#include "test_support.hpp"
#include "training/loss_curve.hpp"
#include "training/trainer.hpp"

using namespace ap;

TEST_CASE("on_step sees every step with its position, a resumed run's mean covers only its own steps of the epoch") {
  const dataset d = test::small_blobs(48);  // 5 batches of 10 (the last of 8) per epoch
  sequential model = test::nine_layer_model();
  local_runner runner(model, optimizer_config{});
  train_config c = test::small_train_config();  // 3 epochs
  std::vector<step_progress> seen;
  c.on_step = [&](const step_progress& p) { seen.push_back(p); };
  const train_report r = train(runner, d, d, c);
  REQUIRE(seen.size() == 15);
  for (std::size_t i = 0; i < seen.size(); ++i) {
    CAPTURE(i);
    CHECK(seen[i].step == i);
    CHECK(seen[i].epoch == i / 5);
    CHECK(seen[i].batch == i % 5);
    CHECK(seen[i].batches == 5);
    CHECK(seen[i].steps_done == i + 1);
    CHECK(seen[i].steps_total == 15);
  }
  CHECK(seen.back().samples == 3 * 48);
  CHECK(r.last_loss == doctest::Approx(seen.back().loss));
  CHECK(r.final_loss_steps == 5);
  double last_epoch = 0.0;
  for (std::size_t i = 10; i < 15; ++i) last_epoch += seen[i].loss / 5.0;
  CHECK(r.final_loss == doctest::Approx(last_epoch));

  // Resumed at step 12 (epoch 2, batch 2): 3 steps of that epoch, and the mean is theirs.
  train_config resumed = test::small_train_config();
  resumed.start_step = 12, resumed.start_epoch = 2, resumed.start_batch = 2;
  seen.clear();
  resumed.on_step = [&](const step_progress& p) { seen.push_back(p); };
  const train_report rr = train(runner, d, d, resumed);
  REQUIRE(seen.size() == 3);
  CHECK(seen.front().step == 12);
  CHECK(seen.front().steps_total == 3);
  CHECK(rr.final_loss_steps == 3);
  CHECK(rr.final_loss == doctest::Approx((seen[0].loss + seen[1].loss + seen[2].loss) / 3.0));
  CHECK(rr.last_loss == doctest::Approx(seen[2].loss));
}

TEST_CASE("the progress line names epoch, step, loss, speed and the time left") {
  step_progress p;
  p.epoch = 1, p.batch = 56, p.batches = 234, p.loss = 0.54321, p.steps_done = 100, p.steps_total = 400;
  p.samples = 12800, p.elapsed_s = 10.0;
  CHECK(progress_line(p, 10) == "epoch 2/10  step 57/234  loss 0.5432  1280 samples/s  ETA 0:30");
  p.elapsed_s = 100.0;  // 1 s a step, 300 left
  CHECK(progress_line(p, 10).find("ETA 5:00") != std::string::npos);
}

TEST_CASE("the loss curve SVG has a point per step and a dot per epoch mean") {
  loss_curve c;
  for (int s = 0; s < 12; ++s) c.steps.push_back({static_cast<double>(s), 2.0 / (1 + s)});
  c.epochs = {{5, 0.8}, {11, 0.3}};
  const std::string svg = to_svg(c, "a <run>");
  CHECK(svg.rfind("<svg", 0) == 0);
  CHECK(svg.find("a &lt;run&gt;") != std::string::npos);
  const auto steps = svg.find("class=\"steps\" points=\"");
  REQUIRE(steps != std::string::npos);
  const std::string points = svg.substr(steps, svg.find('"', steps + 22) - steps);
  CHECK(test::count_of(points, ",") == 12);
  CHECK(test::count_of(svg, "<circle") == 2);
  CHECK_THROWS_AS(to_svg(loss_curve{}, "empty"), std::invalid_argument);
}

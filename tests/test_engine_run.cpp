// The engine from C++ trains exactly as `actorpipe train` does with the same configuration: one process, a D x P x T
// mesh, a pipeline on nodes, and --auto (its chosen configuration, repeated); a user's own model and data sets
// through it; the metrics log; callbacks.
#include <doctest/doctest.h>

#include <chrono>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/engine.hpp"
#include "node_process.hpp"
#include "cli_runs.hpp"
#include "test_support.hpp"

using namespace ap;
using namespace std::chrono_literals;

namespace {

using test::actorpipe;

nlohmann::json run_cli(const run_config& c) {
  test::scratch_dir dir("engine_cli");
  std::ofstream(dir.file("run.json")) << config_json(c).dump(2);
  return test::result_of(test::run_actorpipe({"train", "--config", dir.file("run.json")}, test::scaled(180s)));
}

run_config small_run() {
  run_config c;
  c.model = "784-32-16-10";
  c.data.limit = 256;
  c.train.batch_size = 32;
  c.train.max_steps = 5;
  c.threads = 1;
  return c;
}

void check_same_training(const nlohmann::json& engine_line, const nlohmann::json& cli_line) {
  for (const char* key : {"last_step_loss", "last_epoch_mean_loss", "test_accuracy", "steps"}) {
    CAPTURE(key);
    CHECK(engine_line.at(key) == cli_line.at(key));
  }
}

}  // namespace

TEST_CASE("the engine from C++ equals train: one process, D x P x T, with callbacks") {
  for (int mesh = 0; mesh < 2; ++mesh) {
    run_config c = small_run();
    if (mesh == 1) {
      c.stages = 2, c.mesh.data_parallel = 2, c.mesh.tensor_parallel = 2, c.pipe.microbatches = 2;
    }
    std::vector<double> losses;
    std::vector<std::string> lines;
    engine_callbacks callbacks;
    callbacks.on_step = [&](const step_progress& p, float) { losses.push_back(p.loss); };
    callbacks.log = [&](const std::string& line) { lines.push_back(line); };
    engine e(c, callbacks);
    const run_result result = e.run();
    CHECK(losses.size() == 5);
    CHECK(result.training.steps == 5);
    CHECK(result.training.last_loss == doctest::Approx(losses.back()));
    CHECK(!lines.empty());
    check_same_training(result.to_json(), run_cli(c));
  }
}

TEST_CASE("the engine on nodes equals train on the same nodes") {
  test::node_process first(actorpipe, {"--insecure"}), second(actorpipe, {"--insecure"});
  run_config c = small_run();
  c.stages = 2, c.pipe.microbatches = 2;
  c.pipe.nodes = {first.address(), second.address()};
  c.pipe.security.insecure = true;
  engine e(c);
  const run_result result = e.run();
  check_same_training(result.to_json(), run_cli(c));
}

TEST_CASE("--auto from C++: the chosen configuration, repeated by train from it, trains the same") {
  run_config c = small_run();
  c.threads = 0;
  c.auto_config = true;
  c.auto_trials = 1;
  engine e(c);
  const run_result result = e.run();
  CHECK_FALSE(result.config.auto_config);
  CHECK(result.to_json().contains("auto"));
  CHECK(result.to_json().at("auto").at("stages") == result.config.stages);
  // The choice as a file: train repeats the run from it (the same mesh, so the same losses).
  const nlohmann::json repeated = run_cli(result.config);
  CHECK(repeated.at("stages") == result.config.stages);
  CHECK(repeated.at("data_parallel") == result.config.mesh.data_parallel);
  check_same_training(result.to_json(), repeated);
}

TEST_CASE("a user's own model and data sets through the engine equal the spec's and the files' run") {
  run_config c = small_run();
  const sequential model = sequential::from_spec(c.model, sequential_options{c.activation, c.init_seed});
  data_config d;
  d.path = "/usr/share/datasets/fashion-mnist";
  d.limit = 256;
  const data_sets sets = open_data(d, 0, 10, c.train.seed, 0);
  engine own(model.clone(), c, sets);
  const run_result mine = own.run();
  engine from_spec(c);
  const run_result spec = from_spec.run();
  check_same_training(mine.to_json(), spec.to_json());
  CHECK(mine.training.test_accuracy > 0.0);
}

TEST_CASE("the metrics log: one line per step with the lr, one per validation, appended on resume") {
  test::scratch_dir dir("metrics");
  run_config c;
  c.model = "gpt:layers=1,dim=16,heads=2,context=8";
  c.train.batch_size = 4;
  c.train.max_steps = 4;
  c.threads = 1;
  c.eval_every = 2;
  c.validation_windows = 4;
  c.optimizer.schedule.kind = "linear";
  c.optimizer.schedule.warmup_steps = 2;
  c.log_file = dir.file("metrics.jsonl");
  c.checkpoint_file = dir.file("ckpt.safetensors");
  c.train.checkpoint_every = 2;
  engine(c).run();
  const auto read_lines = [&] {
    std::vector<nlohmann::json> lines;
    std::ifstream in(c.log_file);
    for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
    return lines;
  };
  std::vector<nlohmann::json> lines = read_lines();
  std::vector<nlohmann::json> steps, validations;
  for (const auto& l : lines) (l.contains("validation_loss") ? validations : steps).push_back(l);
  REQUIRE(steps.size() == 4);
  CHECK(validations.size() == 2);  // after steps 2 and 4
  CHECK(steps[0].at("lr").get<double>() == doctest::Approx(0.5e-3));  // warmup: lr * (s + 1) / 2
  CHECK(steps[1].at("lr").get<double>() == doctest::Approx(1e-3));
  CHECK(steps[3].at("lr").get<double>() < steps[2].at("lr").get<double>());  // decaying to the run's end
  for (const auto& s : steps) {
    CHECK(s.contains("loss"));
    CHECK(s.contains("tokens_per_s"));
    CHECK(s.contains("samples_per_s"));
  }
  // A resumed run appends: the first run to step 2, then on to 4 from its checkpoint.
  run_config first = c;
  first.log_file = dir.file("resumed.jsonl");
  first.train.max_steps = 2;
  first.checkpoint_file = dir.file("half.safetensors");
  first.optimizer.schedule.decay_steps = 4;
  engine(first).run();
  run_config second = first;
  second.train.max_steps = 4;
  second.resume_file = dir.file("half.safetensors");
  second.checkpoint_file.clear();
  second.train.checkpoint_every = 0;
  engine(second).run();
  c.log_file = dir.file("resumed.jsonl");
  std::vector<nlohmann::json> resumed = read_lines();
  std::vector<nlohmann::json> resumed_steps;
  for (const auto& l : resumed)
    if (!l.contains("validation_loss")) resumed_steps.push_back(l);
  REQUIRE(resumed_steps.size() == 4);
  for (std::size_t i = 0; i < 4; ++i) {
    CHECK(resumed_steps[i].at("step") == steps[i].at("step"));
    CHECK(resumed_steps[i].at("loss") == steps[i].at("loss"));  // bit for bit
    CHECK(resumed_steps[i].at("lr") == steps[i].at("lr"));
  }
}

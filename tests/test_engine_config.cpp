// The run configuration: every key read from JSON and written back, a bad key or value named with its line, the
// checks between keys, and `train --config F` against the same flags on three meshes and on nodes.
#include <doctest/doctest.h>

#include <chrono>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/run_config.hpp"
#include "cli_runs.hpp"
#include "node_process.hpp"
#include "test_support.hpp"

using namespace ap;
using namespace std::chrono_literals;

namespace {

using test::actorpipe;

void write(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
}

// The figures of two runs that do not depend on time: the losses, accuracy, steps and learning rate, in both and
// equal; and the mesh's keys, equal where either run has them (a single process names no stages).
void check_same_trajectory(const nlohmann::json& got, const nlohmann::json& expected) {
  test::check_same_fields(got, expected, {"last_step_loss", "last_epoch_mean_loss", "test_accuracy", "steps", "lr"});
  for (const char* key : {"stages", "data_parallel", "tensor_parallel", "schedule", "microbatches", "layers_per_chunk"}) {
    INFO("the result's \"" << key << "\"");
    CHECK(got.contains(key) == expected.contains(key));
    if (got.contains(key) && expected.contains(key)) CHECK(got.at(key) == expected.at(key));
  }
}

nlohmann::json run_train(std::vector<std::string> args) {
  args.insert(args.begin(), "train");
  return test::result_of(test::run_actorpipe(args, test::scaled(180s)));
}

// `args` as a JSON file of keys: "--stages 2" is "stages": 2 (numbers and flags typed as the key is).
std::string as_config(const std::vector<std::string>& args) {
  run_config c;
  config_document doc = config_document::object();
  const config_document defaults = config_json(c);
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string key = args[i].substr(2);
    const config_document& d = defaults.at(key);
    if (d.is_boolean()) {
      doc[key] = true;
      continue;
    }
    const std::string value = args[++i];
    if (d.is_string()) doc[key] = value;
    else if (d.is_array()) doc[key] = value;  // a list as the flag's comma-separated text
    else if (d.is_number_float()) doc[key] = std::stod(value);
    else doc[key] = std::stoll(value);
  }
  return doc.dump(2);
}

}  // namespace

TEST_CASE("every key round-trips through JSON, and a file sets the keys it names over the defaults") {
  run_config c;
  c.train.batch_size = 32;
  c.stages = 2;
  c.pipe.schedule = "1f1b";
  c.pipe.layers_per_chunk = {2, 3};
  c.optimizer.schedule.kind = "cosine";
  c.optimizer.schedule.warmup_steps = 7;
  c.mesh.clip_grad_norm = 0.5f;
  c.pipe.security.insecure = true;
  c.data.path = "x.npy";
  const config_document doc = config_json(c);
  CHECK(doc.at("batch-size") == 32);
  CHECK(doc.at("layers-per-chunk") == config_document::array({2, 3}));
  CHECK(doc.at("warmup-steps") == 7);
  run_config back;
  apply_config_json(back, doc);
  CHECK(config_json(back) == doc);
  CHECK(doc.begin().key() == "model");  // in the listed order, not alphabetical

  test::scratch_dir dir("config");
  write(dir.file("run.json"), R"({
  "model": "784-32-10",
  "batch-size": 16,
  "lr": 0.01,
  "lr-schedule": "cosine",
  "beta2": 0.95,
  "sequence-lengths": [4, 8],
  "nodes": "a:1,b:2",
  "insecure": true
})");
  const run_config f = read_run_config(dir.file("run.json"));
  CHECK(f.model == "784-32-10");
  CHECK(f.train.batch_size == 16);
  CHECK(f.optimizer.lr == doctest::Approx(0.01));
  CHECK(f.optimizer.schedule.kind == "cosine");
  CHECK(f.optimizer.beta2 == doctest::Approx(0.95));  // Adam's moments: GPT-2 runs take 0.95
  CHECK(f.optimizer.beta1 == run_config{}.optimizer.beta1);
  CHECK(f.train.sequence_lengths == std::vector<std::size_t>{4, 8});
  CHECK(f.pipe.nodes == std::vector<std::string>{"a:1", "b:2"});
  CHECK(f.pipe.security.insecure);
  CHECK(f.train.epochs == run_config{}.train.epochs);  // unnamed keys keep their defaults
}

TEST_CASE("a bad key or value in a file is refused naming the file, the line and the key, and the config is unchanged") {
  test::scratch_dir dir("config_bad");
  const auto refusal = [&](const std::string& text) {
    write(dir.file("run.json"), text);
    return test::error_of([&] { read_run_config(dir.file("run.json")); });
  };
  const std::string unknown = refusal("{\n  \"stages\": 2,\n  \"batch_size\": 64\n}");
  CHECK(test::contains(unknown, "run.json:3: unknown key 'batch_size'"));
  CHECK(test::contains(unknown, "did you mean 'batch-size'"));
  const std::string type = refusal("{\n  \"epochs\": \"three\"\n}");
  CHECK(test::contains(type, "run.json:2: key 'epochs': expected a whole number"));
  const std::string range = refusal("{\"model\": \"784-10\",\n\n \"batch-size\": -1}");
  CHECK(test::contains(range, "run.json:3: key 'batch-size': -1 is not a whole number >= 1"));
  CHECK(test::contains(refusal("{\"schedule\": \"2f2b\"}"), "key 'schedule': '2f2b' is not one of"));
  CHECK(test::contains(refusal("{\"insecure\": 1}"), "key 'insecure': expected true or false"));
  CHECK(test::contains(refusal("{\"lr\": \"fast\"}"), "key 'lr': expected a number"));
  CHECK(test::contains(refusal("{\"layers-per-chunk\": [2, \"x\"]}"), "key 'layers-per-chunk': expected a list of whole numbers"));
  const std::string syntax = refusal("{\n  \"stages\": 2,\n  \"epochs\" 3\n}");
  CHECK(test::contains(syntax, "run.json:3: not valid JSON"));
  CHECK(test::contains(refusal("[1, 2]"), "a run configuration is a JSON object"));

  run_config c;
  CHECK_THROWS_AS(apply_config_json(c, config_document{{"stages", 3}, {"epochs", -2}}), std::invalid_argument);
  CHECK(c.stages == 0);  // nothing applied from a refused document
}

TEST_CASE("check_run_config: keys that need each other, values set in C++, and an lr schedule longer than the run") {
  run_config c;
  c.pipe.microbatches = 8;
  CHECK(test::contains(test::error_of([&] { check_run_config(c); }), "--microbatches needs --stages N"));
  c.stages = 2;
  CHECK_NOTHROW(check_run_config(c));
  c.train.batch_size = 0;  // set in C++, past the flag's check: the same check here
  CHECK(test::contains(test::error_of([&] { check_run_config(c); }), "--batch-size: 0 is not a whole number >= 1"));
  c.train.batch_size = 64;
  c.train.max_steps = 100;
  c.optimizer.schedule.kind = "cosine";
  c.optimizer.schedule.warmup_steps = 500;
  c.optimizer.schedule.decay_steps = 100;
  CHECK(test::contains(test::error_of([&] { check_run_config(c); }), "warmup_steps 500"));
  run_config a;
  a.auto_config = true;
  a.stages = 2;
  CHECK(test::contains(test::error_of([&] { check_run_config(a); }), "--stages is chosen by --auto"));
  run_config t;
  t.eval_every = 5;
  CHECK(test::contains(test::error_of([&] { check_run_config(t); }), "--eval-every needs a gpt model"));
  run_config n;
  n.pipe.restart_on_failure = 2;
  CHECK(test::contains(test::error_of([&] { check_run_config(n); }), "--restart-on-failure requires --nodes"));
}

TEST_CASE("train --config F runs as the same flags do: one process, a 2 x 2 mesh, a pipeline, and flags override the file") {
  test::scratch_dir dir("config_runs");
  const std::vector<std::string> common = {"--model", "784-32-16-10", "--train-limit", "256", "--batch-size", "32",
                                           "--max-steps", "5", "--threads", "1", "--lr-schedule", "cosine",
                                           "--warmup-steps", "2", "--min-lr", "0.0001"};
  const std::vector<std::vector<std::string>> meshes = {
      {},
      {"--data-parallel", "2", "--tensor-parallel", "2"},
      {"--stages", "2", "--microbatches", "4", "--schedule", "1f1b", "--layers-per-chunk", "2,3"},
  };
  for (const auto& mesh : meshes) {
    std::vector<std::string> args = common;
    args.insert(args.end(), mesh.begin(), mesh.end());
    CAPTURE(as_config(args));
    write(dir.file("run.json"), as_config(args));
    const nlohmann::json by_flags = run_train(args), by_file = run_train({"--config", dir.file("run.json")});
    check_same_trajectory(by_file, by_flags);
    CHECK(by_flags.at("lr").get<double>() < 1e-3);  // decayed by cosine over the 5 steps
  }
  // A flag given beside the file wins over the file's key.
  write(dir.file("run.json"), as_config(common));
  const nlohmann::json overridden = run_train({"--config", dir.file("run.json"), "--max-steps", "3"});
  CHECK(overridden.at("steps") == 3);
}

TEST_CASE("train --print-config writes what a run repeats from, --auto's choice included") {
  test::scratch_dir dir("config_print");
  const test::program_run p = test::run_actorpipe({"train", "--model", "784-32-10", "--train-limit", "256",
                                                  "--batch-size", "32", "--max-steps", "3", "--auto", "--auto-trials",
                                                  "0", "--print-config"});
  std::string text;
  for (const std::string& line : p.lines) text += line + "\n";
  INFO(p.err);
  REQUIRE(p.code == 0);
  const config_document printed = config_document::parse(text);
  CHECK(printed.at("auto") == false);
  CHECK(printed.at("max-steps") == 3);
  write(dir.file("chosen.json"), text);
  const run_config back = read_run_config(dir.file("chosen.json"));
  CHECK(config_json(back) == printed);
  CHECK_NOTHROW(check_run_config(back));  // a run repeats from it without --auto's refusals
  const nlohmann::json repeated = run_train({"--config", dir.file("chosen.json")});
  CHECK(repeated.at("steps") == 3);
}

TEST_CASE("train --config F on two nodes runs as the same flags do") {
  test::node_process first(actorpipe, {"--insecure"}), second(actorpipe, {"--insecure"});
  test::scratch_dir dir("config_nodes");
  const std::vector<std::string> args = {"--model", "784-32-16-10", "--train-limit", "256", "--batch-size", "32",
                                         "--max-steps", "4", "--stages", "2", "--microbatches", "2",
                                         "--nodes", first.address() + "," + second.address(), "--insecure"};
  write(dir.file("run.json"), as_config(args));
  const nlohmann::json by_flags = run_train(args), by_file = run_train({"--config", dir.file("run.json")});
  check_same_trajectory(by_file, by_flags);
}

// `actorpipe train`: trains a Sequential on Fashion-MNIST, in one process or on a pipeline of stage actors,
// and ends with one JSON line (samples_per_s, final_loss, test_accuracy, wall_s, ...).
#include <fstream>
#include <iostream>
#include <memory>

#include <nlohmann/json.hpp>

#include "actors/pipeline.hpp"
#include "cli/commands.hpp"
#include "data/fashion_mnist.hpp"
#include "tensor/matmul.hpp"
#include "training/trainer.hpp"

namespace ap::cli {
namespace {

struct train_options {
  std::string model = "784-512-256-10";
  std::string activation = "relu";
  std::string data_dir = default_fashion_mnist_dir;
  std::size_t train_limit = 0;  // use only the first N training samples (0: all)
  train_config train;
  optimizer_config optimizer;
  std::uint64_t init_seed = 1;
  int stages = 0;  // 0: single process, no actors
  pipeline_options pipe;
  long timeout_ms = 30000;
  std::string trace_file;
  bool stage_log = false;
};

dataset first_samples(dataset d, std::size_t n) {
  if (n == 0 || n >= d.size()) return d;
  d.inputs = slice_rows(d.inputs, 0, n);
  d.labels = slice_rows(d.labels, 0, n);
  return d;
}

void run_train(const train_options& o) {
  set_blas_threads(1);
  const dataset train_set = first_samples(load_fashion_mnist("train", o.data_dir), o.train_limit);
  const dataset test_set = load_fashion_mnist("test", o.data_dir);
  sequential model = sequential::from_spec(o.model, sequential_options{o.activation, o.init_seed});
  train_config config = o.train;
  config.log = [](const std::string& line) { std::cerr << line << "\n"; };

  nlohmann::json out;
  std::unique_ptr<pipeline> pipe;
  std::unique_ptr<step_runner> local;
  step_runner* runner = nullptr;
  if (o.stages > 0) {
    pipeline_options p = o.pipe;
    p.stages = o.stages;
    p.optimizer = o.optimizer;
    p.timeout = std::chrono::milliseconds(o.timeout_ms);
    p.record_events = !o.trace_file.empty() || o.stage_log;
    pipe = std::make_unique<pipeline>(model, p);
    runner = pipe.get();
    std::cerr << "pipeline: " << p.stages << " stages, " << p.microbatches << " microbatches, schedule "
              << p.schedule << "\n";
    const auto& ranges = pipe->chunk_ranges();
    for (std::size_t c = 0; c < ranges.size(); ++c)
      std::cerr << "  chunk " << c << " on stage " << stage_of_chunk(static_cast<int>(c), p.stages) << ": "
                << to_string(ranges[c]) << "\n";
  } else {
    local = std::make_unique<local_runner>(model, o.optimizer);
    runner = local.get();
  }

  const train_report r = train(*runner, train_set, test_set, config);
  out["model"] = o.model;
  out["stages"] = o.stages;
  out["steps"] = r.steps;
  out["samples_per_s"] = r.samples_per_s;
  out["final_loss"] = r.final_loss;
  out["test_accuracy"] = r.test_accuracy;
  out["wall_s"] = r.wall_s;
  if (pipe) {
    const auto events = pipe->events();
    out["schedule"] = o.pipe.schedule;
    out["microbatches"] = o.pipe.microbatches;
    out["peak_stash"] = pipe->last_peak_stash();
    if (!events.empty()) {
      auto busy = busy_time_us(events, o.stages);
      for (auto& b : busy) b /= 1e6;
      out["busy_s"] = busy;
    }
    if (o.stage_log)
      for (const auto& line : render_stage_log(events, o.pipe.chunks_per_stage)) std::cerr << line << "\n";
    if (!o.trace_file.empty()) {
      std::ofstream f(o.trace_file);
      if (!f) throw std::runtime_error("cannot write the trace to " + o.trace_file);
      f << chrome_trace(events, o.stages);
      std::cerr << "trace written to " << o.trace_file << "\n";
    }
  }
  std::cout << out.dump() << std::endl;
}

}  // namespace

void add_train_command(CLI::App& app) {
  auto o = std::make_shared<train_options>();
  o->optimizer.kind = "adam";
  o->optimizer.lr = 1e-3f;
  auto* cmd = app.add_subcommand("train", "train a model on Fashion-MNIST (single process, or a pipeline with --stages)");
  cmd->add_option("--model", o->model, "layer widths, Linear layers with activations between")->capture_default_str();
  cmd->add_option("--activation", o->activation, "relu, gelu, tanh or sigmoid")->capture_default_str();
  cmd->add_option("--epochs", o->train.epochs)->capture_default_str();
  cmd->add_option("--batch-size", o->train.batch_size)->capture_default_str();
  cmd->add_option("--max-steps", o->train.max_steps, "stop after this many steps (0: whole epochs)")->capture_default_str();
  cmd->add_option("--seed", o->train.seed, "data order seed")->capture_default_str();
  cmd->add_option("--init-seed", o->init_seed, "weight initialisation seed")->capture_default_str();
  cmd->add_option("--optimizer", o->optimizer.kind, "sgd, adam or adamw")->capture_default_str();
  cmd->add_option("--lr", o->optimizer.lr)->capture_default_str();
  cmd->add_option("--momentum", o->optimizer.momentum)->capture_default_str();
  cmd->add_option("--weight-decay", o->optimizer.weight_decay)->capture_default_str();
  cmd->add_option("--data", o->data_dir, "directory of the Fashion-MNIST IDX files")->capture_default_str();
  cmd->add_option("--train-limit", o->train_limit, "use only the first N training samples")->capture_default_str();
  cmd->add_option("--stages", o->stages, "pipeline stages (0: single process, no actors)")->capture_default_str();
  cmd->add_option("--microbatches", o->pipe.microbatches)->capture_default_str();
  cmd->add_option("--schedule", o->pipe.schedule, "gpipe, 1f1b, interleaved or zb-h1")->capture_default_str();
  cmd->add_option("--chunks", o->pipe.chunks_per_stage, "chunks per stage (interleaved)")->capture_default_str();
  cmd->add_option("--layers-per-chunk", o->pipe.layers_per_chunk, "explicit partition: layer count of every chunk");
  cmd->add_option("--timeout-ms", o->timeout_ms, "longest wait on a peer")->capture_default_str();
  cmd->add_option("--trace", o->trace_file, "write a Chrome trace (JSON) of the stages' tasks");
  cmd->add_flag("--stage-log", o->stage_log, "print every stage's current task and queue at each event");
  cmd->callback([o] { run_train(*o); });
}

}  // namespace ap::cli

// The parts of `actorpipe train`, in the order run_train (train_command.cpp) calls them: check the flags,
// build the plan (the model and its data), build the runner (single process, mesh or pipeline), run the
// training, report (stderr lines, files, the one JSON line on stdout).
#pragma once

#include <cstdint>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "actors/data_parallel_pipeline.hpp"
#include "actors/pipeline.hpp"
#include "data/dataset.hpp"
#include "data/fashion_mnist.hpp"
#include "data/text_corpus.hpp"
#include "model/sequential.hpp"
#include "plan/auto_config.hpp"
#include "plan/memory_model.hpp"
#include "schedule/schedule.hpp"
#include "stage/event_log.hpp"
#include "stage/timeline.hpp"
#include "training/loss_curve.hpp"
#include "training/data_tensor_runner.hpp"
#include "training/trainer.hpp"

namespace ap::cli {

struct train_options {
  std::string model = "784-512-256-10";
  std::string activation = "relu";
  std::string data_dir = default_fashion_mnist_dir;
  std::size_t train_limit = 0;  // use only the first N training samples (0: all)
  train_config train;
  optimizer_config optimizer;
  std::uint64_t init_seed = 1;
  int stages = 0;  // 0: single process, no actors
  int threads = 0;  // intra-op threads of every compute rank (Note [cores per rank]); 0: the cores divided evenly
  data_tensor_options mesh;  // data and tensor parallelism of the single process (training/data_tensor_runner.hpp)
  pipeline_options pipe;
  std::string partition = "params";  // uniform, params or time (Note [default partition]); pipe.layers_per_chunk overrides it
  long timeout_ms = default_timeout.count();
  long restart_wait_ms = 60000;
  std::string trace_file;
  std::string plot_file;      // the loss curve (SVG)
  std::string timeline_file;  // the last step as it ran above it simulated with its measured costs (SVG)
  std::string schedule_file;  // a user's schedule (grid or CSV), instead of --schedule
  bool stage_log = false;
  std::string checkpoint_file;  // written every train.checkpoint_every steps and at the end
  std::string resume_file;      // loaded before training, which continues from its position
  // A gpt model trains on text (train_plan below).
  std::string text_path = default_text_path;
  std::size_t eval_every = 0;           // steps between validation losses (0: only at the end)
  std::size_t validation_windows = 256; // at most this many windows of validation text
  std::string dtype = "fp32";   // compute dtype (Note [compute dtype] in model/layer.hpp)
  std::string recompute = "none";  // Note [recomputation] in model/block.hpp
  std::string max_memory;          // per stage, e.g. "2G" (Note [memory model]); empty: no budget
  std::string export_file;      // the final weights in the compute dtype (Note [exported weights])
  std::string collectives = "auto";  // Note [collective backends]: auto, ring or gloo, set into pipe.collectives
  std::string rendezvous;  // "env": Note [environment rendezvous] in network/rendezvous.hpp
  bool auto_config = false;     // --auto: choose the mesh (Note [automatic configuration] in plan/auto_config.hpp)
  int auto_trials = 3;          // --auto-trials: the best predicted configurations run for a few steps (Note [auto trials])
  std::vector<std::string> pipeline_flags;  // the pipeline-only flags given (with --auto: unused if it picks no pipeline)
};

// --- check the flags (train_checks.cpp) ---

// Every check before any work: output paths first (a run never trains fully and then fails to write), the
// --resume checkpoint's model, the --schedule-file (read and validated against the run), the transport,
// the mesh, --threads. Throws std::invalid_argument naming the flag; returns the user's schedule, if any.
std::optional<schedule> check_train_flags(const train_options& o);

// --- build the plan (train_plan.cpp) ---

// What a run trains: the model and its data. A language model (a gpt spec) trains on windows of text: the
// training part's windows at offsets drawn from the data seed, the validation part's first windows in order
// as its test set.
struct train_plan {
  std::optional<schedule> user_schedule;  // --schedule-file, checked
  bool language_model = false;
  std::size_t context = 0;  // tokens per window of a language model
  dtype compute_dtype = dtype::float32;
  sequential model;
  dataset train_set, test_set;
  std::optional<auto_candidate> auto_choice;  // --auto's
  std::vector<layer_cost> layer_costs;        // --auto's, for the chosen microbatch (else the pipeline measures)
};

// The model, and a language model's text (before the model: a context the text cannot fill is refused first).
train_plan plan_model(const train_options& o, std::optional<schedule> user_schedule);
// The Fashion-MNIST training and test sets, unless the plan's text already gave them; then --train-limit.
void plan_data(const train_options& o, train_plan& plan);

// --- --auto (train_auto.cpp) ---

// Measures the model's layer costs on this process's cores (one microbatch of the training data per size), predicts
// every configuration that fits them and --max-memory, prints the best few and sets `o` and the plan to the
// best (Note [automatic configuration]).
void choose_configuration(train_options& o, train_plan& plan);

// --- build the runner (train_runner_choice.cpp) ---

// What trains the plan: one of a local_runner, a data_tensor_runner (data or tensor parallelism without stages), a
// pipeline or D replicas of one; and, for a pipeline, what the report needs besides the training.
struct train_runner {
  std::unique_ptr<std::ofstream> trace_file;  // before the pipeline, so it outlives it: its stages write the trace
  std::shared_ptr<chrome_trace_writer> trace;
  std::unique_ptr<step_runner> local;                  // single process
  std::unique_ptr<data_parallel_pipeline> replicated;  // the pipeline's D replicas (--data-parallel with --stages)
  std::unique_ptr<pipeline> single_pipe;
  pipeline* pipe = nullptr;  // the pipeline (replica 0 of several) that describes the run; null without stages
  step_runner* runner = nullptr;
  std::string partition;               // uniform, params, time or explicit (--layers-per-chunk)
  std::vector<double> predicted_busy;  // seconds per step and stage, from the measured layer costs
  std::vector<stage_memory> predicted_memory;  // per stage, its tensor-parallel ranks together (Note [memory model])
  resident_memory before;  // this process's where its growth is measured from (its peak reset then, where allowed)
  std::uint64_t tensors_before = 0;  // its tensor bytes then (Note [tensor bytes]), their peak reset then
  // Note [memory model]: what building and training are predicted to add to this process (0: not predicted, or
  // the stages are on nodes), and its parts in words.
  std::uint64_t predicted_growth_bytes = 0;
  std::string predicted_growth_parts;
  bool stages_on_nodes = false;  // then the process's growth is the coordinator's own
  bool peak_reset = false;
  double predicted_makespan = 0.0;     // seconds per step: the schedule simulated with the layer costs
  std::shared_ptr<step_recorder> steps = std::make_shared<step_recorder>();  // fed by the stages (latest step)
};

// The data- or tensor-parallel runner of a single process (--data-parallel or --tensor-parallel without
// --stages), else null. Made before the Fashion-MNIST data is read: a width the mesh cannot split is refused
// at once, naming the layer.
std::unique_ptr<step_runner> make_mesh_runner(const train_options& o, sequential& model);
// The runner: `mesh` if given, a pipeline with --stages (its partition from layer costs measured on one
// microbatch of training data, described on stderr), else a local_runner on every core (or --threads).
train_runner build_train_runner(const train_options& o, train_plan& plan, std::unique_ptr<step_runner> mesh);

// --- run (train_run.cpp) ---

struct train_outcome {
  train_report report;
  std::optional<std::uint64_t> resumed_at_step;  // --resume: the checkpoint's step
  loss_curve curve;                              // every step's loss and each epoch's mean, with --plot
  std::uint64_t training_peak = 0;  // the process's resident peak after the last step (before the final test); 0: not read
  std::uint64_t tensor_peak = 0;    // its tensor bytes' peak then (Note [tensor bytes])
};

// Trains: progress on a terminal, --resume, --checkpoint, a language model's validation every --eval-every.
train_outcome run_training(const train_options& o, const train_plan& plan, step_runner& runner);

// A language model's validation loss in nats per byte (its labels are bytes), printed with bits per byte;
// predicted in batches of --batch-size (Note [evaluation in batches] in training/trainer.hpp).
double validation_loss(const train_options& o, step_runner& runner, const dataset& validation, const std::string& when);

// --- report (train_report.cpp) ---

// --auto's check after its first steps (train_auto.cpp): the median of the steps after the first against the
// prediction, on stderr; `step_ends` holds the elapsed seconds at the end of steps 1 .. auto_early_steps + 1.
inline constexpr std::size_t auto_early_steps = 5;
void report_auto_early(const auto_candidate& chosen, std::vector<double> step_ends);
// --auto's prediction against the measured step, and what was off by more than 15% (train_auto.cpp).
void report_auto(const train_plan& plan, const train_runner& runner, const train_report& report, nlohmann::json& out);

// Writes --plot, --timeline, --trace and --export, prints the stages' busy times, and ends with the JSON line.
void report_training(const train_options& o, const train_plan& plan, train_runner& runner, const train_outcome& run);

}  // namespace ap::cli

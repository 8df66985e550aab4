// The engine's parts, in the order engine::run calls them: check the configuration, build the plan, choose the
// mesh (--auto), build the runner, train, report. Internal to the engine.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <sstream>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "actors/data_parallel_pipeline.hpp"
#include "actors/pipeline.hpp"
#include "data/dataset.hpp"
#include "data/data_source.hpp"
#include "engine/engine.hpp"
#include "engine/run_config.hpp"
#include "model/sequential.hpp"
#include "plan/auto_config.hpp"
#include "plan/memory_model.hpp"
#include "schedule/schedule.hpp"
#include "stage/event_log.hpp"
#include "stage/timeline.hpp"
#include "training/loss_curve.hpp"
#include "training/data_tensor_runner.hpp"
#include "training/trainer.hpp"

namespace ap::engine_parts {

class machine_measurements;  // --auto's (auto_choice.cpp)

// `say(sink) << ... << "\n";` writes lines to engine_callbacks::log.
using log_sink = std::function<void(const std::string&)>;
class log_line {
 public:
  explicit log_line(const log_sink& sink) : sink_(sink) {}
  ~log_line();
  log_line(const log_line&) = delete;
  log_line& operator=(const log_line&) = delete;
  template <class T>
  log_line& operator<<(const T& v) {
    text_ << v;
    return *this;
  }

 private:
  const log_sink& sink_;
  std::ostringstream text_;
};

// --- build the plan (plan.cpp) ---

// What a run trains. A language model trains on token windows at offsets drawn from the data seed; the
// validation part's first windows are its test set.
struct train_plan {
  log_sink log;
  std::optional<schedule> user_schedule;
  bool language_model = false;
  std::size_t context = 0;  // tokens per window
  dtype compute_dtype = dtype::float32;
  sequential model;
  std::shared_ptr<const data_source> train_set, test_set;  // test_set may be null
  std::optional<auto_candidate> auto_choice;  // --auto's
  std::vector<layer_cost> layer_costs;  // --auto's, for the chosen microbatch
  std::shared_ptr<machine_measurements> measured;  // --auto's, kept for an elastic run's planning
  std::function<std::vector<double>()> stage_busy;  // for the metrics log
  std::function<void(std::uint64_t step)> after_checkpoint;  // Note [elastic runs]
};
inline log_line say(const train_plan& plan) { return log_line(plan.log); }

// The first `rows` samples of `d` as one batch (clamped to 1 .. size), for cost measurements.
batch first_rows(const data_source& d, std::size_t rows);

// --init-from without a gpt --model: the file's shape becomes --model (Note [GPT-2 weight files]).
void model_from_init_file(run_config& o, train_plan& plan);
// The model from the spec unless given, with dtype, recomputation and --init-from's weights.
void plan_model(const run_config& o, train_plan& plan);
// The data unless given; a context the data cannot fill is refused.
void plan_data(const run_config& o, train_plan& plan);

// --- --auto (auto_choice.cpp) ---

// Predicts every configuration that fits --max-memory from measured layer costs and sets `o` and the plan to the
// best (Note [automatic configuration]).
void choose_configuration(run_config& o, train_plan& plan);
// An elastic --auto run's planning on the nodes it has (Note [elastic runs]): the best predicted configuration on
// `nodes`, from the measurements already taken and a survey of the nodes, without trials; nullopt (said in the
// log) when none fits or a node does not answer the survey.
std::optional<auto_candidate> choose_on_nodes(const run_config& o, train_plan& plan,
                                              const std::vector<std::string>& nodes);
// Sets `o` and the plan to train `c`.
void apply_choice(const auto_candidate& c, run_config& o, train_plan& plan);

// --- build the runner (runner_choice.cpp) ---

// What trains the plan, and what the report needs besides.
struct train_runner {
  std::unique_ptr<std::ofstream> trace_file;  // outlives the pipeline
  std::shared_ptr<chrome_trace_writer> trace;
  std::unique_ptr<step_runner> local;                
  std::unique_ptr<data_parallel_pipeline> replicated;
  std::unique_ptr<pipeline> single_pipe;
  pipeline* pipe = nullptr;  // replica 0's; null without stages
  step_runner* runner = nullptr;
  std::string partition;
  std::vector<double> predicted_busy;  // seconds per step and stage
  std::vector<stage_memory> predicted_memory;  // Note [memory model]
  resident_memory before;
  std::uint64_t tensors_before = 0;  // Note [tensor bytes]
  // Predicted growth (0: not predicted, or on nodes) and its parts in words (Note [memory model]).
  std::uint64_t predicted_growth_bytes = 0;
  std::string predicted_growth_parts;
  bool stages_on_nodes = false;
  bool peak_reset = false;
  double predicted_makespan = 0.0;  // seconds per step, simulated
  std::shared_ptr<step_recorder> steps = std::make_shared<step_recorder>();
};

// The data- or tensor-parallel runner of a single process, else null; made before the data is read.
std::unique_ptr<step_runner> make_mesh_runner(const run_config& o, const train_plan& plan, sequential& model);
// The runner: `mesh` if given, a pipeline with --stages, else a local_runner.
train_runner build_train_runner(const run_config& o, train_plan& plan, std::unique_ptr<step_runner> mesh);

// --- run (training_run.cpp) ---

struct train_outcome {
  train_report report;
  std::optional<std::uint64_t> resumed_at_step;
  loss_curve curve;
  std::uint64_t training_peak = 0;  // resident peak after the last step; 0: not read
  std::uint64_t tensor_peak = 0;  // Note [tensor bytes]
  float last_lr = 0.0f;
};

// Trains with progress, --resume, --checkpoint, validation and the metrics log (Note [metrics log]).
train_outcome run_training(const run_config& o, const train_plan& plan, step_runner& runner,
                           const engine_callbacks& callbacks);

// How long an elastic run waits for a node's answer when it asks which nodes are up: --timeout-ms, at most 5 s.
std::chrono::milliseconds elastic_probe_wait(const run_config& o);

// run_training on nodes that shrinks when a node is lost for good and grows back (Note [elastic runs]).
// `runner` is replaced at each change, recorded in `changes`; `segment` is `o` with the last mesh.
train_outcome run_elastic(const run_config& o, run_config& segment, train_plan& plan, train_runner& runner,
                          const engine_callbacks& callbacks, nlohmann::json& changes);

// A language model's validation loss in nats per token (Note [evaluation in batches]).
double validation_loss(const run_config& o, const train_plan& plan, step_runner& runner, const std::string& when);

// --- report (report.cpp) ---

// --auto's check of the median early step against the prediction; `step_ends`: elapsed seconds at the end of
// steps 1 .. auto_early_steps + 1.
inline constexpr std::size_t auto_early_steps = 5;
void report_auto_early(const train_plan& plan, const auto_candidate& chosen, std::vector<double> step_ends);
// --auto's prediction against the measured step.
void report_auto(const train_plan& plan, const train_runner& runner, const train_report& report, nlohmann::json& out);

// Writes --plot, --timeline, --trace and --export, and fills the result.
void report_training(const run_config& o, const train_plan& plan, train_runner& runner, const train_outcome& run,
                     run_result& result);

}  // namespace ap::engine_parts

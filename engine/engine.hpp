// The engine: a model, a run configuration and data sets in; a trained model, progress and a result out. It is
// what `actorpipe train` does: runner choice and build, --auto, memory prediction and budget, resume,
// checkpoints, validation, recovery, the metrics log and the report.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "data/data_source.hpp"
#include "engine/run_config.hpp"
#include "model/sequential.hpp"
#include "training/trainer.hpp"

namespace ap {

// What a run reports: the figures of `actorpipe train`'s JSON line, and the configuration it ran with.
struct run_result {
  train_report training;                   // steps, samples, losses, speeds, test accuracy
  std::optional<std::uint64_t> resumed_at_step;
  std::optional<double> validation_loss;   // a language model's, at the end (nats per token)
  float last_lr = 0.0f;                    // the lr of the last step taken
  run_config config;                       // as it ran
  nlohmann::json details;                  // the mesh's figures: busy times, stash, memory, --auto's check, ...
  nlohmann::json to_json() const;          // the JSON line
};

// Called as the run goes; each may be empty. `log` gets the lines `train` prints on stderr.
struct engine_callbacks {
  std::function<void(const std::string&)> log;
  std::function<void(const step_progress&, float lr)> on_step;
  std::function<void(std::uint64_t step, double loss)> on_validation;
};

class engine {
 public:
  // The model from config.model (a spec), the data from config.data (or the text, for a gpt).
  explicit engine(run_config config, engine_callbacks callbacks = {});
  // A user's own model and data (data.validation may be null: no validation). config.model names it in reports.
  engine(sequential model, run_config config, data_sets data, engine_callbacks callbacks = {});
  ~engine();
  engine(const engine&) = delete;
  engine& operator=(const engine&) = delete;

  // Checks everything (std::invalid_argument naming the key, or file and place), reads the data and chooses the
  // mesh: the configuration a run would train with, without training.
  const run_config& resolve();
  // resolve(), then builds the runner, trains, validates and reports. Once.
  run_result run();

  // The configuration resolved so far: after resolve(), with --auto's choice and the lr schedule's decay steps.
  const run_config& config() const;
  // The trained model, its weights gathered from every stage (after run()).
  sequential trained_model();

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace ap

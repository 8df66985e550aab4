// The engine: a model, a run configuration and data in; a trained model, progress and a result out. It is all
// that `actorpipe train` does.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "data/data_source.hpp"
#include "engine/run_config.hpp"
#include "model/sequential.hpp"
#include "training/trainer.hpp"

namespace ap {

// What a run reports: the figures of `actorpipe train`'s JSON line, and the configuration it ran with.
struct run_result {
  train_report training;                 
  std::optional<std::uint64_t> resumed_at_step;
  std::optional<double> validation_loss;   // nats per token, at the end
  float last_lr = 0.0f;                  
  run_config config;                     
  nlohmann::json details;                  // the mesh's figures
  nlohmann::json to_json() const;        
};

// Called as the run goes; each may be empty. `log` gets the lines `train` prints on stderr.
struct engine_callbacks {
  std::function<void(const std::string&)> log;
  std::function<void(const step_progress&, float lr)> on_step;
  std::function<void(std::uint64_t step, double loss)> on_validation;
  // With --elastic: the nodes that joined the run since it started, asked at each checkpoint (Note [joining nodes]).
  std::function<std::vector<std::string>()> joining_nodes;
};

class engine {
 public:
  // The model and data from the configuration.
  explicit engine(run_config config, engine_callbacks callbacks = {});
  // A user's own model and data (data.validation may be null: no validation). config.model names it in reports.
  engine(sequential model, run_config config, data_sets data, engine_callbacks callbacks = {});
  ~engine();
  engine(const engine&) = delete;
  engine& operator=(const engine&) = delete;

  // Checks everything (std::invalid_argument naming the key), reads the data and chooses the mesh, without
  // training.
  const run_config& resolve();
  // resolve(), then builds the runner, trains, validates and reports. Once.
  run_result run();

  // After resolve(): with --auto's choice and the decay steps.
  const run_config& config() const;
  // The trained model, its weights gathered from every stage (after run()).
  sequential trained_model();

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace ap

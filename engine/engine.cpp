#include "engine/engine.hpp"

#include <stdexcept>

#include "engine/engine_parts.hpp"
#include "model/lr_schedule.hpp"
#include "tensor/compute.hpp"
#include "tensor/matmul.hpp"

namespace ap {

using namespace engine_parts;

struct engine::impl {
  run_config config;
  engine_callbacks callbacks;
  train_plan plan;
  train_runner runner;
  std::unique_ptr<step_runner> mesh;  // the D x T runner, made while resolving
  bool resolved = false, ran = false;
};

engine::engine(run_config config, engine_callbacks callbacks) : impl_(std::make_unique<impl>()) {
  impl_->config = std::move(config);
  impl_->callbacks = std::move(callbacks);
  impl_->plan.log = impl_->callbacks.log;
}

engine::engine(sequential model, run_config config, data_sets data, engine_callbacks callbacks)
    : engine(std::move(config), std::move(callbacks)) {
  if (model.empty()) throw std::invalid_argument("engine: the model has no layers");
  if (!data.train) throw std::invalid_argument("engine: no training data (data_sets::train is null)");
  impl_->plan.model = std::move(model);
  impl_->plan.train_set = std::move(data.train);
  impl_->plan.test_set = std::move(data.validation);
}

engine::~engine() = default;

const run_config& engine::config() const { return impl_->config; }

namespace {

// Note [lr schedule's length]: a decay without decay-steps ends at the run's last step; set before any runner
// copies the optimizer settings, so all ranks decay alike and print-config shows it.
bool needs_run_length(const run_config& o) {
  const std::string& kind = o.optimizer.schedule.kind;
  return (kind == "cosine" || kind == "linear") && o.optimizer.schedule.decay_steps == 0 && o.train.max_steps == 0;
}

void resolve_lr_schedule(run_config& o, const train_plan& plan) {
  std::uint64_t total = o.train.max_steps;
  if (total == 0 && plan.train_set)
    total = o.train.epochs * batch_count(plan.train_set->size(), o.train.batch_size);
  const std::string& kind = o.optimizer.schedule.kind;
  if ((kind == "cosine" || kind == "linear") && o.optimizer.schedule.decay_steps == 0) o.optimizer.schedule.decay_steps = total;
  check_lr_schedule(o.optimizer, total);
}

}  // namespace

const run_config& engine::resolve() {
  if (impl_->resolved) return impl_->config;
  impl_->resolved = true;
  run_config& o = impl_->config;
  train_plan& plan = impl_->plan;
  model_from_init_file(o, plan);
  // Every check before any work; a model given in C++ is the one a resumed checkpoint must match.
  plan.user_schedule = check_run_config(o, plan.log, plan.model.empty() ? nullptr : &plan.model);
  set_compute_threads(1);
  plan_model(o, plan);
  if (plan.compute_dtype == dtype::bfloat16 && current_compute_backend() == compute_backend::onednn && !onednn_avx512())
    say(plan) << "bf16: this machine's processor has no AVX-512, so oneDNN makes no bf16 products here: they run in "
                 "fp32 on the bf16 values (the same results up to the order of sums; the memory saved, not the time)";
  // --auto and a decay to the run's end need the data first; otherwise the mesh runner comes first, so a split it
  // cannot make fails before the data is read.
  const bool data_first = o.auto_config || needs_run_length(o);
  if (data_first) plan_data(o, plan);
  resolve_lr_schedule(o, plan);
  if (o.auto_config) {
    choose_configuration(o, plan);
    if (o.stages == 0)
      for (const auto& [key, set] : {std::pair{"trace", !o.trace_file.empty()}, {"timeline", !o.timeline_file.empty()},
                                     {"stage-log", o.stage_log}})
        if (set) say(plan) << "auto: --" << key << " applies only to a pipeline: unused";
  }
  impl_->mesh = make_mesh_runner(o, plan, plan.model);
  if (!data_first) {
    plan_data(o, plan);
    resolve_lr_schedule(o, plan);  // the warmup, now that the steps are known
  }
  return o;
}

run_result engine::run() {
  if (impl_->ran) throw std::logic_error("engine::run: an engine runs once");
  impl_->ran = true;
  resolve();
  run_config& o = impl_->config;
  train_plan& plan = impl_->plan;
  // An elastic run builds its runner on the nodes that answer (Note [elastic runs]).
  if (o.elastic == 0) impl_->runner = build_train_runner(o, plan, std::move(impl_->mesh));
  train_runner& r = impl_->runner;
  if (r.pipe || o.elastic > 0)
    plan.stage_busy = [&r] { return r.replicated ? r.replicated->first().busy_seconds() : r.pipe->busy_seconds(); };
  nlohmann::json changes = nlohmann::json::array();
  run_config last_mesh = o;  // an elastic run's mesh at its end
  const train_outcome outcome = o.elastic > 0 ? run_elastic(o, last_mesh, plan, r, impl_->callbacks, changes)
                                              : run_training(o, plan, *r.runner, impl_->callbacks);
  run_result result;
  report_training(last_mesh, plan, r, outcome, result);
  if (o.elastic > 0) result.details["elastic"] = changes;
  result.config = o;
  result.config.auto_config = false;
  return result;
}

sequential engine::trained_model() {
  if (impl_->runner.pipe) return impl_->runner.pipe->gather_model();
  return impl_->plan.model.clone();
}

nlohmann::json run_result::to_json() const { return details; }

}  // namespace ap

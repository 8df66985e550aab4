// The engine's report: loss curve, validation, busy times, timeline, trace, exported weights, and the result
// (`actorpipe train`'s JSON line).
#include <cmath>
#include <fstream>
#include <stdexcept>

#include "checkpoint/gpt2_weights.hpp"
#include "engine/engine_parts.hpp"
#include "plan/partition.hpp"

namespace ap::engine_parts {
namespace {

void write_loss_plot(const run_config& o, const train_plan& plan, const loss_curve& curve) {
  if (o.plot_file.empty() || curve.steps.empty()) return;
  std::ofstream plot(o.plot_file);
  plot << to_svg(curve, "loss per step and epoch mean: " + o.model + (o.stages ? ", " + std::to_string(o.stages) + " stages" : ""));
  if (!plot.flush()) throw std::runtime_error("cannot write the loss curve to " + o.plot_file);
  say(plan) << "loss curve written to " << o.plot_file << "\n";
}

// What every run reports.
void report_run(const run_config& o, const train_plan& plan, const train_outcome& run, nlohmann::json& out) {
  const train_report& r = run.report;
  if (run.resumed_at_step) out["resumed_at_step"] = *run.resumed_at_step;
  out["model"] = o.model;
  out["stages"] = o.stages;
  out["data_parallel"] = o.mesh.data_parallel;
  out["tensor_parallel"] = o.mesh.tensor_parallel;
  if (o.mesh.sequence_parallel) out["sequence_parallel"] = true;
  if (o.mesh.clip_grad_norm > 0.0f) out["clip_grad_norm"] = o.mesh.clip_grad_norm;
  out["dtype"] = dtype_name(plan.compute_dtype);
  out["recompute"] = recompute_mode_name(plan.model.recompute());
  out["steps"] = r.steps;
  out["samples_per_s"] = r.samples_per_s;
  // Over this invocation's steps of its last epoch only: named so.
  out["last_epoch_mean_loss"] = r.final_loss;
  out["last_epoch_steps"] = r.final_loss_steps;
  out["last_step_loss"] = r.last_loss;
  out["test_accuracy"] = r.test_accuracy;
  out["wall_s"] = r.wall_s;
  out["median_step_s"] = r.median_step_s;
}

// --timeline: the last step as it ran, above its simulation from the measured costs.
void write_timeline(const run_config& o, const train_plan& plan, const pipeline& pipe, const step_recorder& steps, nlohmann::json& out) {
  if (o.timeline_file.empty() || steps.last().empty()) return;
  const measured_step m = measure_step(steps.last(), pipe.schedule());
  const simulation sim = simulate(pipe.schedule(), measured_costs(m, pipe.schedule()));
  std::ofstream svg(o.timeline_file);
  svg << timeline_svg(pipe.schedule(), m, sim);
  if (!svg.flush()) throw std::runtime_error("cannot write the timeline to " + o.timeline_file);
  const double ideal = m.busy / o.stages;
  out["timeline"] = {{"step", m.step},
                     {"measured_makespan_s", m.makespan},
                     {"simulated_makespan_s", sim.makespan},
                     {"measured_bubble", ideal > 0 ? m.makespan / ideal - 1.0 : 0.0},
                     {"simulated_bubble", sim.bubble}};
  say(plan) << "timeline of step " << m.step << " written to " << o.timeline_file << ": measured makespan "
            << m.makespan * 1e3 << " ms, simulated with its costs " << sim.makespan * 1e3 << " ms\n";
}

// A pipeline's report: schedule, partition, stash, busy times measured and predicted, makespan, timeline, trace.
void report_pipeline(const run_config& o, const train_plan& plan, train_runner& r, const train_outcome& run,
                     nlohmann::json& out) {
  const pipeline& pipe = *r.pipe;
  const std::size_t steps = run.report.steps;
  out["schedule"] = plan.user_schedule ? "file:" + o.schedule_file : o.pipe.schedule;
  out["microbatches"] = o.pipe.microbatches;
  out["peak_stash"] = pipe.last_peak_stash();
  out["peak_stash_bytes"] = pipe.last_peak_stash_bytes();
  if (!r.predicted_memory.empty()) {  // Note [memory model]
    std::vector<std::uint64_t> stash, total;
    for (const stage_memory& m : r.predicted_memory) stash.push_back(m.stash), total.push_back(m.total());
    out["predicted_peak_stash_bytes"] = stash;
    out["predicted_memory_bytes"] = total;
  }
  out["partition"] = r.partition;
  out["layers_per_chunk"] = chunk_layer_counts(pipe.chunk_ranges());
  out["predicted_busy_s"] = r.predicted_busy;  // per step, as busy_s
  auto busy = pipe.busy_seconds();
  for (std::size_t s = 0; s < busy.size(); ++s) {
    busy[s] /= static_cast<double>(std::max<std::size_t>(steps, 1));
    say(plan) << "stage " << s << ": busy " << busy[s] * 1e3 << " ms per step, predicted "
              << r.predicted_busy[s] * 1e3 << " ms\n";
  }
  out["busy_s"] = busy;
  out["predicted_makespan_s"] = r.predicted_makespan;  // per step
  out["makespan_s"] = r.steps->mean_makespan_s();       // per step, measured
  say(plan) << "step makespan " << r.steps->mean_makespan_s() * 1e3 << " ms, predicted "
            << r.predicted_makespan * 1e3 << " ms\n";
  write_timeline(o, plan, pipe, *r.steps, out);
  if (!o.pipe.nodes.empty()) out["restarts"] = r.replicated ? r.replicated->restarts() : pipe.restarts();
  if (r.trace) {
    r.trace->finish();
    if (!*r.trace_file) throw std::runtime_error("cannot write the trace to " + o.trace_file);
    say(plan) << "trace written to " << o.trace_file << "\n";
  }
}

// Predicted growth against the measured tensor and resident peaks, where both were measured (Note [memory model]).
void report_memory(const train_plan& plan, const train_runner& r, const train_outcome& run, nlohmann::json& out) {
  if (!r.peak_reset || run.training_peak <= r.before.now) return;
  const bool on_nodes = r.stages_on_nodes;
  if (r.predicted_growth_bytes == 0 && !on_nodes) return;
  const std::uint64_t predicted = r.predicted_growth_bytes;
  const std::uint64_t grown = run.training_peak - r.before.now;
  const std::uint64_t tensors = run.tensor_peak - std::min(run.tensor_peak, r.tensors_before);
  out["resident_peak_growth_bytes"] = grown;
  out["tensor_peak_growth_bytes"] = tensors;
  if (on_nodes) {  // the coordinator's own
    say(plan) << "memory: the stages run on nodes; building and training grew this process's tensors' peak "
              << memory_text(tensors) << " and its resident peak " << memory_text(grown) << "\n";
    return;
  }
  out["predicted_process_growth_bytes"] = predicted;
  say(plan) << "memory: predicted " << memory_text(predicted) << " (" << r.predicted_growth_parts
            << "); building and training grew the tensors' peak " << memory_text(tensors) << " and the resident peak "
            << memory_text(grown) << " (" << std::lround(100.0 * static_cast<double>(grown) / static_cast<double>(predicted))
            << "% of the prediction)\n";
}

// --export (Note [exported weights]) and --export-as (Note [GPT-2 weight files]) from one gather.
void export_trained_weights(const run_config& o, const train_plan& plan, train_runner& r) {
  if (o.export_file.empty() && o.export_as_file.empty()) return;
  sequential trained = r.pipe ? r.pipe->gather_model() : plan.model.clone();
  if (!o.export_file.empty()) {
    export_weights(o.export_file, trained, plan.compute_dtype);
    say(plan) << "weights written to " << o.export_file << " in " << dtype_name(plan.compute_dtype) << "\n";
  }
  if (!o.export_as_file.empty()) {
    const gpt2_format format = gpt2_format_for_path(o.export_as_file);
    write_gpt2_weights(o.export_as_file, format, parse_gpt_spec(o.model), trained);
    say(plan) << "weights written to " << o.export_as_file << " as " << gpt2_format_name(format) << " GPT-2 weights\n";
  }
}

}  // namespace

void report_training(const run_config& o, const train_plan& plan, train_runner& r, const train_outcome& run,
                     run_result& result) {
  nlohmann::json& out = result.details;
  write_loss_plot(o, plan, run.curve);
  if (plan.language_model && plan.test_set) {
    const double nats = validation_loss(o, plan, *r.runner, "end");
    result.validation_loss = nats;
    out["validation_loss"] = nats;
    out["bits_per_token"] = nats / std::log(2.0);
    if (plan.train_set->num_classes() == 256) out["bits_per_byte"] = nats / std::log(2.0);  // a byte-level model
    out["tokens_per_s"] = run.report.positions_per_s;  // Note [sequence lengths]
  }
  report_run(o, plan, run, out);
  out["lr"] = run.last_lr;
  if (r.pipe) report_pipeline(o, plan, r, run, out);
  report_memory(plan, r, run, out);
  report_auto(plan, r, run.report, out);
  export_trained_weights(o, plan, r);
  result.training = run.report;
  result.resumed_at_step = run.resumed_at_step;
  result.last_lr = run.last_lr;
}

}  // namespace ap::engine_parts

// Note [elastic runs]: with --elastic MIN, a pipeline on nodes goes on when a node is lost for good. A step that
// loses a node (error_code::lost_node, after --restart-on-failure's waits if given) ends the runner; while MIN or
// more listed nodes answer, the run continues on them from its last checkpoint (before the first: from its start),
// on the mesh elastic_mesh gives (Note [elastic mesh]), the checkpoint resharded onto a new partition and the data
// order kept (Note [resumed trajectory]): the steps since the checkpoint are trained again, none skipped. The run
// starts on the nodes that answer; at each checkpoint the others are asked again, and those that answer and make
// the mesh larger are taken in from that checkpoint, as are nodes that joined the run (Note [joining nodes]); the
// mesh never grows past the one planned on the listed nodes, and nodes beyond it wait as spares. Each change is
// logged and kept for the result line ("elastic"); below MIN the run stops, naming the checkpoint to resume from.
// With --auto the planner chooses each mesh instead (choose_on_nodes: the measurements of the start, the nodes
// surveyed again, no trials), and nodes that answer again are taken in only when its choice on them uses more
// nodes than the current one; a set of nodes it declined is not planned for again.
#include <algorithm>
#include <chrono>
#include <stdexcept>

#include "actors/node_probe.hpp"
#include "actors/recovery.hpp"
#include "engine/engine_parts.hpp"
#include "plan/mesh.hpp"

namespace ap::engine_parts {
namespace {

using clock = std::chrono::steady_clock;

// Thrown out of the training loop by a checkpoint at which nodes left out answer again.
struct nodes_back {
  std::vector<std::string> nodes;
};

std::string mesh_text(const mesh_shape& m) {
  return std::to_string(m.data_parallel) + " x " + std::to_string(m.stages) + " x " + std::to_string(m.tensor_parallel);
}

std::string joined(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& s : items) out += (out.empty() ? "" : ", ") + s;
  return out.empty() ? "none" : out;
}

}  // namespace

std::chrono::milliseconds elastic_probe_wait(const run_config& o) {
  return std::min(std::chrono::milliseconds(o.timeout_ms), std::chrono::milliseconds(5000));
}

train_outcome run_elastic(const run_config& o, run_config& segment, train_plan& plan, train_runner& runner,
                          const engine_callbacks& callbacks, nlohmann::json& changes) {
  std::vector<std::string> listed = o.pipe.nodes;  // and the nodes that join, after them
  const std::size_t planned_nodes = listed.size();  // the mesh never grows past the one planned on these
  const auto minimum = static_cast<std::size_t>(o.elastic);
  if (listed.size() < minimum)
    throw std::invalid_argument("--elastic " + std::to_string(o.elastic) + ": only " + std::to_string(listed.size()) +
                                " nodes to train on");
  const mesh_shape planned{o.mesh.data_parallel, o.stages, o.mesh.tensor_parallel};
  const auto probe_wait = elastic_probe_wait(o);
  const std::size_t layers = plan.model.size();
  const auto fits = [&](const mesh_shape& m) {
    if (static_cast<std::size_t>(m.stages * o.pipe.chunks_per_stage) > layers) return false;
    try {
      make_schedule(o.pipe.schedule, m.stages, o.pipe.microbatches, o.pipe.chunks_per_stage);
      return true;
    } catch (const std::invalid_argument&) {
      return false;
    }
  };

  const auto take_joined = [&] {
    if (!callbacks.joining_nodes) return;
    for (const std::string& n : callbacks.joining_nodes())
      if (std::find(listed.begin(), listed.end(), n) == listed.end()) {
        listed.push_back(n);
        say(plan) << "elastic: node " << n << " joined the run";
      }
  };
  // The nodes to train on: those answering, at most as many as planned, listed ones first.
  const auto ask_nodes = [&] {
    take_joined();
    std::vector<std::string> a = nodes_answering(listed, o.pipe.security, probe_wait);
    if (a.size() > planned_nodes) a.resize(planned_nodes);
    return a;
  };

  segment = o;  // the mesh trained on now, and where it starts
  std::optional<std::uint64_t> checkpointed;  // this run's last checkpoint: the step it holds
  std::uint64_t run_start = 0, segment_start = 0;  // the steps the run and the current mesh started from
  std::size_t kept_steps = 0, kept_samples = 0;  // steps of earlier meshes before the current one's start
  std::vector<std::size_t> samples_after;     // on the current mesh: samples trained after each of its steps
  bool at_end = false;
  clock::time_point last_step_end = clock::now();
  std::optional<clock::time_point> changed_at;  // a change waiting for its first step
  std::optional<std::uint64_t> resumed_at;      // the run's own --resume
  std::vector<std::string> declined;            // answering again, not taken in by --auto's choice
  engine_callbacks on_mesh = callbacks;
  on_mesh.on_step = [&](const step_progress& p, float lr) {
    last_step_end = clock::now();
    at_end = p.steps_done == p.steps_total;
    if (samples_after.empty()) {
      segment_start = p.step + 1 - p.steps_done;
      if (changes.empty()) {
        run_start = segment_start;
        if (!o.resume_file.empty()) resumed_at = run_start;
      }
    }
    samples_after.push_back(p.samples);
    if (changed_at) {
      const double lost = std::chrono::duration<double>(last_step_end - *changed_at).count();
      changes.back()["seconds_lost"] = lost;
      say(plan) << "elastic: step " << p.step << " trained on the new mesh, " << lost << " s after the last step before the change";
      changed_at.reset();
    }
    if (callbacks.on_step) callbacks.on_step(p, lr);
  };
  struct hook_reset {  // the hook below refers to this call's locals
    train_plan& plan;
    ~hook_reset() { plan.after_checkpoint = nullptr; }
  } reset_hook{plan};
  plan.after_checkpoint = [&](std::uint64_t step) {
    checkpointed = step;
    take_joined();
    if (segment.pipe.nodes.size() >= planned_nodes || at_end) return;
    std::vector<std::string> left_out;
    for (const auto& n : listed)
      if (std::find(segment.pipe.nodes.begin(), segment.pipe.nodes.end(), n) == segment.pipe.nodes.end())
        left_out.push_back(n);
    std::vector<std::string> back = nodes_answering(left_out, o.pipe.security, probe_wait);
    if (back.empty()) return;
    // Taken in when they make the mesh larger; else they wait as spares for a node lost later.
    if (o.auto_config) {
      if (back == declined) return;
      std::vector<std::string> more = segment.pipe.nodes;
      more.insert(more.end(), back.begin(), back.end());
      const std::optional<auto_candidate> c = choose_on_nodes(segment, plan, more);
      if (c && plan.auto_choice && c->config.nodes > plan.auto_choice->config.nodes) throw nodes_back{std::move(back)};
      declined = std::move(back);
      return;
    }
    const auto larger = elastic_mesh(planned, planned_nodes, segment.pipe.nodes.size() + back.size(), fits);
    if (larger && larger->data_parallel * larger->stages > segment.mesh.data_parallel * segment.stages)
      throw nodes_back{std::move(back)};
  };

  // The run starts on the listed nodes that answer (a node that comes up later is taken in at a checkpoint).
  std::vector<std::string> answering = ask_nodes();
  std::string why;  // what changes the mesh before the next training; empty: nothing
  if (answering.size() < planned_nodes) {
    std::vector<std::string> silent;
    for (const auto& n : o.pipe.nodes)
      if (std::find(answering.begin(), answering.end(), n) == answering.end()) silent.push_back(n);
    why = joined(silent) + (silent.size() == 1 ? " does" : " do") + " not answer at the start";
  }
  std::optional<clock::time_point> lost_at;  // the last step before a change (none at the start)
  for (;;) {
    if (!why.empty()) {
      std::optional<auto_candidate> choice;
      std::optional<mesh_shape> next;
      if (!o.auto_config)
        next = elastic_mesh(planned, planned_nodes, answering.size(), fits);
      else if (!lost_at && plan.auto_choice)
        choice = plan.auto_choice;  // choose_configuration planned on the nodes answering at the start
      else if (answering.size() >= minimum)
        choice = choose_on_nodes(segment, plan, answering);
      if (choice) next = mesh_shape{choice->config.data_parallel, choice->config.stages, choice->config.tensor_parallel};
      if (answering.size() < minimum || !next)
        throw pipeline_error("elastic: " + std::to_string(answering.size()) + " of the " + std::to_string(listed.size()) +
                                 " nodes answer (" + joined(answering) + ")" +
                                 (answering.size() < minimum ? ", fewer than --elastic " + std::to_string(o.elastic)
                                                             : std::string(", and no mesh fits them")) +
                                 " (" + why + "); " +
                                 (checkpointed ? "the last checkpoint is " + o.checkpoint_file + " (step " +
                                                     std::to_string(*checkpointed) + "): resume from it"
                                               : std::string("no checkpoint was written yet")),
                             error_code::lost_node);
      // What the current mesh trained before the step it is left at stays in the run's counts.
      const std::uint64_t restart_step = checkpointed ? *checkpointed : run_start;
      if (restart_step > segment_start && !samples_after.empty()) {
        kept_steps += static_cast<std::size_t>(restart_step - segment_start);
        kept_samples += samples_after.at(static_cast<std::size_t>(restart_step - segment_start) - 1);
      }
      samples_after.clear();
      const mesh_shape old{segment.mesh.data_parallel, segment.stages, segment.mesh.tensor_parallel};
      segment.pipe.nodes = answering;
      if (choice) {
        apply_choice(*choice, segment, plan);
      } else {
        segment.stages = next->stages;
        segment.mesh.data_parallel = next->data_parallel;
        segment.pipe.layers_per_chunk.clear();  // partitioned again for the new stage count
      }
      declined.clear();
      segment.resume_file = checkpointed ? o.checkpoint_file : o.resume_file;
      segment_start = restart_step;
      say(plan) << "elastic: " << why << "; " << answering.size() << " of " << listed.size() << " nodes answer ("
                << joined(answering) << "): " << (lost_at ? "continuing" : "starting") << " from "
                << (checkpointed ? "the checkpoint of step " : "step ") << restart_step << " on " << mesh_text(*next)
                << " (D x P x T) instead of " << mesh_text(old);
      changes.push_back({{"step", restart_step}, {"old_mesh", mesh_text(old)}, {"new_mesh", mesh_text(*next)},
                         {"nodes", answering}, {"why", why}});
      changed_at = lost_at;
    }
    runner = build_train_runner(segment, plan, nullptr);
    try {
      train_outcome outcome = run_training(segment, plan, *runner.runner, on_mesh);
      if (changes.empty()) return outcome;
      outcome.resumed_at_step = resumed_at;
      outcome.report.steps += kept_steps, outcome.report.samples += kept_samples;
      return outcome;
    } catch (const pipeline_error& e) {
      if (!restart_recovers(e)) throw;
      why = std::string("a node was lost: ") + e.what();
    } catch (const nodes_back& b) {
      why = joined(b.nodes) + (b.nodes.size() == 1 ? " now answers" : " now answer");
      last_step_end = clock::now();
    }
    lost_at = last_step_end;
    // The stages let go of their nodes (and a trace its file) before any new stage is placed.
    runner.replicated.reset(), runner.single_pipe.reset(), runner.local.reset();
    runner = train_runner{};
    answering = ask_nodes();
  }
}

}  // namespace ap::engine_parts

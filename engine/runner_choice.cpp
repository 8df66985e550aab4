// The engine's runner: a local_runner, a data_tensor_runner, or a pipeline (D replicas with --data-parallel).
#include <algorithm>
#include <map>
#include <optional>
#include <stdexcept>

#include "engine/engine_parts.hpp"
#include "model/tensor_parallel.hpp"
#include "model/vocab_parallel.hpp"
#include "plan/cores.hpp"
#include "plan/memory_model.hpp"
#include "plan/mesh.hpp"
#include "plan/partition.hpp"
#include "tensor/compute.hpp"
#include "tensor/tensor_memory.hpp"

namespace ap::engine_parts {
namespace {

// The pipeline's options from the flags.
pipeline_options pipeline_options_of(const run_config& o, const train_plan& plan, train_runner& r) {
  pipeline_options p = o.pipe;
  p.stages = o.stages;
  p.optimizer = o.optimizer;
  p.timeout = std::chrono::milliseconds(o.timeout_ms);
  p.compute_dtype = plan.compute_dtype;
  p.custom_schedule = plan.user_schedule;
  p.restart_wait = std::chrono::milliseconds(o.restart_wait_ms);
  p.log = plan.log;
  p.loss = o.loss;
  p.tensor_parallel = o.mesh.tensor_parallel;
  p.sequence_parallel = o.mesh.sequence_parallel;
  p.clip_grad_norm = o.mesh.clip_grad_norm;
  p.threads = o.threads;  // Note [cores per rank]
  p.collectives = o.collectives == "auto" ? default_collective_backend()
                                          : *parse_collective_backend(o.collectives);  // checked by the CLI
  // Events are streamed, never kept, so a long run stays flat (Note [bounded event log]).
  if (!o.trace_file.empty()) {
    r.trace_file = std::make_unique<std::ofstream>(o.trace_file);
    if (!*r.trace_file) throw std::runtime_error("cannot write the trace to " + o.trace_file);
    r.trace = std::make_shared<chrome_trace_writer>(*r.trace_file, p.stages);
  }
  p.on_event = [trace = r.trace, steps = r.steps, sink = plan.log,
                log = o.stage_log ? std::make_shared<stage_log_snapshots>(p.stages, p.chunks_per_stage) : nullptr](
                   const stage_event& e) {
    if (log) log_line(sink) << log->add(e);  // Note [seed's walkthrough]
    if (trace) trace->add(e);
    steps->add(e);
  };
  return p;
}

// One microbatch of the training data, for layer costs and the memory model.
tensor microbatch_sample(const run_config& o, const train_plan& plan, int microbatches) {
  const std::size_t per = static_cast<std::size_t>(std::max(1, microbatches) * std::max(1, o.mesh.data_parallel));
  return first_rows(*plan.train_set, (o.train.batch_size + per - 1) / per).inputs;
}

// Each stage's predicted peak, its T ranks together (Note [memory model], Note [tensor-parallel memory]);
// `costs` measured here when null.
std::vector<stage_memory> predicted_stage_memory(const run_config& o, train_plan& plan,
                                                 const std::vector<layer_range>& ranges, const schedule& planned,
                                                 const tensor& sample, const std::vector<layer_cost>* costs) {
  const int T = o.mesh.tensor_parallel;
  if (T > 1) {
    std::optional<sequential> rank;
    try {
      std::vector<std::size_t> chunk_layers;
      for (const layer_range& r : ranges) chunk_layers.push_back(r.end - r.begin);
      const bool vocab = splits_vocabulary(plan.model.layer_specs(), o.loss, T) && !whole_batch_backward(planned);
      rank = tensor_parallel_rank(plan.model, chunk_layers, 0, T, vocab, o.mesh.sequence_parallel);
    } catch (const std::invalid_argument&) {
    }
    if (rank) {
      const auto rank_costs = measure_layer_costs(*rank, sample, 1);
      return of_all_ranks(predict_stage_memory(*rank, ranges, planned, rank_costs, o.optimizer), T);
    }
  }
  const std::vector<layer_cost> whole = costs ? *costs : measure_layer_costs(plan.model, sample, 1);
  return across_tensor_parallel(predict_stage_memory(plan.model, ranges, planned, whole, o.optimizer), T);
}

// The pipeline's layout in the log.
void describe_pipeline(const run_config& o, const train_plan& plan, const train_runner& r,
                       const pipeline_options& p) {
  say(plan) << "pipeline: " << p.stages << (p.stages == 1 ? " stage, " : " stages, ") << p.microbatches
            << (p.microbatches == 1 ? " microbatch" : " microbatches") << ", schedule "
            << (plan.user_schedule ? "from " + o.schedule_file : p.schedule) << ", partition " << r.partition << "\n";
  say(plan) << "mesh: " << describe_mesh(mesh_shape{o.mesh.data_parallel, p.stages, o.mesh.tensor_parallel}, p.nodes)
            << "\n";
  if (!p.nodes.empty() && o.mesh.data_parallel > 1)  // Note [collective backends]
    say(plan) << "collectives: " << describe_collective_backend(p.collectives) << " (the replicas' all-reduces between nodes, "
              << (p.security.insecure ? "plain TCP" : "mutual TLS") << ")\n";
  if (p.nodes.empty())  // Note [cores per rank]
    say(plan) << "cores: "
              << cores_layout_text(rank_names(o.mesh.data_parallel, p.stages, o.mesh.tensor_parallel),
                                   r.replicated ? r.replicated->cores() : r.pipe->cores(), process_cores().size())
              << "\n";
  const auto& ranges = r.pipe->chunk_ranges();
  for (std::size_t c = 0; c < ranges.size(); ++c)
    say(plan) << "  chunk " << c << " on stage " << stage_of_chunk(static_cast<int>(c), p.stages) << ": "
              << to_string(ranges[c]) << "\n";
  for (std::size_t c : chunks_without_parameters(plan.model, ranges))  // Note [whole blocks]
    say(plan) << "  warning: chunk " << c << " (" << to_string(ranges[c])
              << ") holds no parameters: the model has fewer blocks (a Linear and its activation) than chunks\n";
  for (int s = 0; s < p.stages; ++s)
    say(plan) << "  stage " << s << ": predicted busy " << r.predicted_busy[static_cast<std::size_t>(s)] * 1e3
              << " ms per step\n";
  const auto T = static_cast<std::uint64_t>(std::max(1, o.mesh.tensor_parallel));
  for (std::size_t s = 0; s < r.predicted_memory.size(); ++s) {  // Note [memory model]
    const stage_memory& m = r.predicted_memory[s];
    say(plan) << "  stage " << s << ": predicted memory " << memory_text(m.total())
              << (T > 1 ? " for its " + std::to_string(T) + " tensor-parallel ranks, each" : std::string()) << " (weights "
              << memory_text(m.parameters / T) << ", gradients " << memory_text(m.gradients / T) << ", optimizer "
              << memory_text(m.optimizer_state / T) << ", stash " << memory_text(m.stash / T) << " at " << m.in_flight
              << " in flight, workspace " << memory_text(m.workspace / T) << weight_copies_text(m.weight_copies / T)
              << ")\n";
  }
}

// Growth is measured from here, after the layer-cost pass and heap trimming (Note [memory model]).
void start_memory_measurement(train_runner& r) {
  return_free_memory();
  r.peak_reset = reset_peak_resident_memory();
  r.before = measure_resident_memory();
  r.tensors_before = tensor_bytes_in_use();
  reset_tensor_bytes_peak();
}

// Each stage's intra-op threads (Note [cores per rank]); empty when nodes decide them.
std::vector<int> stage_threads(const pipeline_options& p) {
  if (p.cores.empty()) return {};
  const auto T = static_cast<std::size_t>(std::max(1, p.tensor_parallel));
  std::vector<int> threads;
  for (std::size_t s = 0; s < static_cast<std::size_t>(p.stages); ++s) threads.push_back(p.cores.at(s * T).threads);
  return threads;
}

// Measures the costs at every stage's thread count too (Note [costs at the stages' threads]).
std::vector<layer_cost> costs_for_stages(const sequential& model, const tensor& sample, std::vector<layer_cost> costs,
                                         int measured_on, const std::vector<int>& threads,
                                         const std::vector<layer_range>& ranges) {
  if (threads.empty()) return costs;
  std::map<int, std::vector<layer_cost>> by_threads{{measured_on, std::move(costs)}};
  for (int t : threads)
    if (!by_threads.count(t)) by_threads[t] = measure_layer_costs(model, sample, 5, t);
  return costs_at_stage_threads(by_threads, threads, ranges);
}

void build_pipeline(const run_config& o, train_plan& plan, train_runner& r) {
  pipeline_options p = pipeline_options_of(o, plan, r);
  const tensor sample = microbatch_sample(o, plan, p.microbatches);
  // --threads 0 on a lone pipeline shares cores by stage cost (Note [cores by stage cost]).
  const bool cores_by_cost = o.threads == 0 && p.nodes.empty() && p.cores.empty() && o.mesh.data_parallel == 1 &&
                             o.mesh.tensor_parallel == 1 && !plan.auto_choice;
  // The cores divided as the pipelines would (Note [cores per rank]).
  if (!cores_by_cost && p.nodes.empty() && p.cores.empty())
    p.cores = assign_cores(process_cores(), o.mesh.data_parallel * p.stages * std::max(1, p.tensor_parallel), p.threads);
  const std::vector<int> known_threads = stage_threads(p);
  const int measured_on = known_threads.empty() ? 1 : known_threads[0];
  auto costs = plan.layer_costs.empty() ? measure_layer_costs(plan.model, sample, 5, measured_on) : plan.layer_costs;
  if (p.layers_per_chunk.empty())
    p.layers_per_chunk = partition_counts(parse_partition_method(o.partition), plan.model, costs,
                                          p.stages * p.chunks_per_stage);
  const std::vector<layer_range> ranges = chunk_ranges_from_counts(p.layers_per_chunk, plan.model.size());
  if (cores_by_cost) {
    const std::vector<int> cores = process_cores();
    p.cores = assign_cores(cores, threads_by_cost(predicted_busy_s(costs, ranges, p.stages, p.microbatches),
                                                  static_cast<int>(cores.size())));
  }
  if (plan.layer_costs.empty())  // --auto measured its own
    costs = costs_for_stages(plan.model, sample, std::move(costs), measured_on, stage_threads(p), ranges);
  r.predicted_busy = predicted_busy_s(costs, ranges, p.stages, p.microbatches);
  // Each stage's peak, refused over --max-memory before any stage is placed (Note [memory budget]).
  const schedule planned = plan.user_schedule ? *plan.user_schedule
                                              : make_schedule(p.schedule, p.stages, p.microbatches, p.chunks_per_stage);
  r.predicted_memory = predicted_stage_memory(o, plan, ranges, planned, sample, &costs);
  if (!o.max_memory.empty()) {
    const std::string over = over_budget(r.predicted_memory, memory_holders(p.stages, o.mesh.data_parallel, p.nodes),
                                         parse_memory_size(o.max_memory));
    if (!over.empty()) throw std::invalid_argument(over);
  }
  r.stages_on_nodes = !p.nodes.empty();
  if (p.nodes.empty()) {  // Note [memory model]
    const auto D = static_cast<std::uint64_t>(o.mesh.data_parallel);
    for (const stage_memory& m : r.predicted_memory) r.predicted_growth_bytes += D * m.total();
    r.predicted_growth_parts = std::to_string(p.stages) + " stages" + (D > 1 ? " x " + std::to_string(D) + " replicas" : "");
  }
  start_memory_measurement(r);
  if (o.mesh.data_parallel > 1) {
    r.replicated = std::make_unique<data_parallel_pipeline>(plan.model, p, o.mesh.data_parallel);
    r.pipe = &r.replicated->first();
    r.runner = r.replicated.get();
  } else {
    r.single_pipe = std::make_unique<pipeline>(plan.model, p);
    r.pipe = r.single_pipe.get();
    r.runner = r.pipe;
  }
  r.predicted_makespan = simulate(r.pipe->schedule(), simulation_costs(costs, ranges, p.stages)).makespan;
  describe_pipeline(o, plan, r, p);
}

}  // namespace

std::unique_ptr<step_runner> make_mesh_runner(const run_config& o, const train_plan& plan, sequential& model) {
  if (o.stages > 0 || o.mesh.data_parallel * o.mesh.tensor_parallel == 1) return nullptr;
  data_tensor_options m = o.mesh;
  m.threads = o.threads;  // Note [cores per rank]
  m.timeout = std::chrono::milliseconds(o.timeout_ms);
  auto mesh = std::make_unique<data_tensor_runner>(model, o.optimizer, o.loss, m);
  // `model` receives the replicas' weights when gathered and needs no gradients (Note [one copy of the gradients]).
  model.release_gradients();
  say(plan) << "mesh: " << mesh->describe() << "\n";
  say(plan) << "cores: " << mesh->cores_layout() << "\n";
  return mesh;
}

// Note [memory budget] for a run without stages: the model D times, each with its share of the batch; refused
// over --max-memory before any step.
void check_single_process_budget(const run_config& o, train_plan& plan, train_runner& r) {
  if (o.max_memory.empty() || plan.auto_choice) return;  // --auto chose within it
  const auto D = static_cast<std::size_t>(o.mesh.data_parallel);
  const std::size_t rows = std::max<std::size_t>(1, std::min(plan.train_set->size(), o.train.batch_size) / D);
  const auto predicted = predicted_stage_memory(o, plan, {layer_range{0, plan.model.size()}}, make_schedule("gpipe", 1, 1),
                                                first_rows(*plan.train_set, rows).inputs, nullptr);
  say(plan) << "memory: predicted " << memory_text(predicted[0].total() * D) << " for " << D << " replica"
            << (D == 1 ? "" : "s") << " of the model (weights " << memory_text(predicted[0].parameters) << ", gradients "
            << memory_text(predicted[0].gradients) << ", optimizer " << memory_text(predicted[0].optimizer_state)
            << ", stash " << memory_text(predicted[0].stash) << ", workspace " << memory_text(predicted[0].workspace)
            << weight_copies_text(predicted[0].weight_copies)
            << " each)\n";
  const std::string over =
      over_budget(predicted, memory_holders(1, o.mesh.data_parallel, {}), parse_memory_size(o.max_memory));
  if (!over.empty()) throw std::invalid_argument(over);
  const stage_memory& m = predicted[0];
  r.predicted_growth_bytes = D * (m.optimizer_state + m.stash + m.workspace + m.weight_copies);
  r.predicted_growth_parts = std::to_string(D) + " x (optimizer " + memory_text(m.optimizer_state) + ", stash " +
                             memory_text(m.stash) + ", workspace " + memory_text(m.workspace) +
                             weight_copies_text(m.weight_copies) + ")";
}

train_runner build_train_runner(const run_config& o, train_plan& plan, std::unique_ptr<step_runner> mesh) {
  train_runner r;
  r.partition = o.pipe.layers_per_chunk.empty() ? o.partition : "explicit";
  if (o.stages > 0) {
    // The stages train; the result is gathered (Note [one copy of the gradients]), freed before the build.
    plan.model.release_gradients();
    build_pipeline(o, plan, r);
    return r;
  }
  // Every core by default; on a shared machine --threads 1 is steadier (a preempted OpenMP thread stalls the
  // others at every barrier).
  check_single_process_budget(o, plan, r);
  start_memory_measurement(r);
  set_compute_threads(o.threads > 0 ? o.threads : single_process_threads());
  r.local = mesh ? std::move(mesh)
                 : std::make_unique<local_runner>(plan.model, o.optimizer, o.loss, o.mesh.clip_grad_norm);
  r.runner = r.local.get();
  return r;
}

}  // namespace ap::engine_parts

// `actorpipe train`: trains a Sequential on Fashion-MNIST (a GPT on text), in one process or on a pipeline of
// stage actors, and ends with one JSON line (samples_per_s, last_epoch_mean_loss, last_step_loss, test_accuracy,
// wall_s, ...; a GPT adds validation_loss, bits_per_byte, tokens_per_s).
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <iostream>
#include <memory>

#include <nlohmann/json.hpp>

#include "plan/partition.hpp"
#include "actors/pipeline.hpp"
#include "cli/checks.hpp"
#include "cli/commands.hpp"
#include "cli/schedule_file.hpp"
#include "cli/transport_flags.hpp"
#include "data/fashion_mnist.hpp"
#include "data/text_corpus.hpp"
#include "model/gpt_spec.hpp"
#include "schedule/schedule.hpp"
#include "stage/timeline.hpp"
#include "tensor/compute.hpp"
#include "training/loss_curve.hpp"
#include "actors/data_parallel_pipeline.hpp"
#include "plan/mesh.hpp"
#include "plan/cores.hpp"
#include "training/data_tensor_runner.hpp"
#include "training/trainer.hpp"

namespace ap::cli {
namespace {

// Each epoch's mean loss at its last step, from the steps as they come (the plot's epoch line).
class epoch_mean_points {
 public:
  void add(const step_progress& p) {
    if (count_ > 0 && p.epoch != epoch_) close();
    epoch_ = p.epoch, sum_ += p.loss, ++count_, last_step_ = p.step;
  }
  std::vector<loss_curve::point> finish() {
    if (count_ > 0) close();
    return points_;
  }

 private:
  void close() {
    points_.push_back({static_cast<double>(last_step_), sum_ / static_cast<double>(count_)});
    sum_ = 0.0, count_ = 0;
  }
  std::uint64_t epoch_ = 0, last_step_ = 0;
  double sum_ = 0.0;
  std::size_t count_ = 0;
  std::vector<loss_curve::point> points_;
};

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
  std::string partition = "uniform";  // uniform, params or time; pipe.layers_per_chunk overrides it
  long timeout_ms = default_timeout.count();
  long restart_wait_ms = 60000;
  std::string trace_file;
  std::string plot_file;      // the loss curve (SVG)
  std::string timeline_file;  // the last step as it ran above it simulated with its measured costs (SVG)
  std::string schedule_file;  // a user's schedule (grid or CSV), instead of --schedule
  bool stage_log = false;
  std::string checkpoint_file;  // written every train.checkpoint_every steps and at the end
  std::string resume_file;      // loaded before training, which continues from its position
  // A gpt model trains on text (language_model_data below).
  std::string text_path = default_text_path;
  std::size_t eval_every = 0;           // steps between validation losses (0: only at the end)
  std::size_t validation_windows = 256; // at most this many windows of validation text
  std::string dtype = "fp32";   // compute dtype (Note [compute dtype] in model/layer.hpp)
  std::string export_file;      // the final weights in the compute dtype (Note [exported weights])
};

// A GPT's training and validation sets: windows of the text's training part at offsets drawn from `seed` (as
// many as it has context-sized pieces), and the validation part's first windows in order.
struct language_model_data {
  dataset train, validation;
  std::size_t context = 0;
};

language_model_data load_language_model_data(const train_options& o, std::uint64_t seed) {
  const gpt_config gpt = parse_gpt_spec(o.model);
  const text_corpus corpus = load_text_corpus(o.text_path);
  check_corpus_fills(corpus, gpt.context);
  std::cerr << "text: " << o.text_path << ", " << corpus.files << " files, " << corpus.train.size()
            << " training and " << corpus.validation.size() << " validation bytes\n";
  language_model_data data;
  data.context = gpt.context;
  data.train = text_windows(corpus.train, gpt.context, std::max<std::size_t>(1, corpus.train.size() / gpt.context),
                            seed, "text train");
  data.validation = text_windows_in_order(corpus.validation, gpt.context, o.validation_windows, "text validation");
  return data;
}

dataset first_samples(dataset d, std::size_t n) {
  if (n == 0 || n >= d.size()) return d;
  d.inputs = slice_rows(d.inputs, 0, n);
  d.labels = slice_rows(d.labels, 0, n);
  return d;
}

// Refuses, before any data is loaded, a --resume checkpoint of another model than --model and --activation
// build, and --checkpoint-every without --checkpoint.
void check_checkpoint_options(const train_options& o) {
  if (o.train.checkpoint_every && o.checkpoint_file.empty())
    throw std::invalid_argument("--checkpoint-every needs --checkpoint PATH");
  if (o.resume_file.empty()) return;
  const checkpoint_info saved = read_checkpoint_info(o.resume_file);
  const auto mine = sequential::from_spec(o.model, sequential_options{o.activation, o.init_seed}).layer_specs();
  if (saved.layer_specs == mine) return;
  const auto join = [](const std::vector<std::string>& specs) {
    std::string text;
    for (const auto& s : specs) text += (text.empty() ? "" : " ") + s;
    return text;
  };
  throw std::invalid_argument("--resume " + o.resume_file + ": the checkpoint holds the model '" +
                              saved.state.model_spec + "' (layers " + join(saved.layer_specs) + "), but --model " +
                              o.model + " --activation " + o.activation + " builds layers " + join(mine) +
                              ": pass the --model and --activation it was trained with");
}

void run_train(const train_options& o) {
  // Every check before any work: outputs first, so a run never trains fully and then fails to write.
  check_output_path("--checkpoint", o.checkpoint_file);
  check_output_path("--trace", o.trace_file);
  check_output_path("--export", o.export_file);
  check_output_path("--plot", o.plot_file);
  check_output_path("--timeline", o.timeline_file);
  check_checkpoint_options(o);
  std::optional<schedule> user_schedule;  // read and validated against the run before any data is loaded
  if (!o.schedule_file.empty()) {
    user_schedule = read_schedule_file(o.schedule_file);
    if (const validation v = validate_for_run(*user_schedule, o.stages, o.pipe.microbatches, o.pipe.chunks_per_stage);
        !v.ok)
      throw std::invalid_argument("--schedule-file " + o.schedule_file + ": " + v.message);
  }
  if (!o.pipe.nodes.empty()) {
    check_transport_security(o.pipe.security, "train --nodes");
    if (o.pipe.security.insecure) std::cerr << insecure_warning("train --nodes") << "\n";
  }
  if (o.stages > 0) check_mesh(mesh_shape{o.mesh.data_parallel, o.stages, o.mesh.tensor_parallel});
  if (o.threads < 0) throw std::invalid_argument("--threads must be 0 (automatic) or more, got " + std::to_string(o.threads));
  set_compute_threads(1);
  const bool language_model = is_gpt_spec(o.model);
  language_model_data text;
  if (language_model) {  // before the model: a context the text cannot fill is refused first
    // The windows a resumed run trains on are the checkpointed run's: Note [resumed trajectory].
    const std::uint64_t seed = o.resume_file.empty() ? o.train.seed : read_checkpoint_info(o.resume_file).state.data_seed;
    text = load_language_model_data(o, seed);
  }
  const dtype compute_dtype = *parse_dtype(o.dtype);  // checked by dtype_name()
  sequential model = sequential::from_spec(o.model, sequential_options{o.activation, o.init_seed});
  model.set_compute_dtype(compute_dtype);
  // A data- or tensor-parallel runner is made before the (Fashion-MNIST) data is read: a width the mesh cannot
  // split is refused at once, naming the layer.
  std::unique_ptr<step_runner> local;
  if (o.stages == 0 && o.mesh.data_parallel * o.mesh.tensor_parallel > 1) {
    data_tensor_options m = o.mesh;
    m.threads = o.threads;
    auto mesh = std::make_unique<data_tensor_runner>(model, o.optimizer, "cross_entropy", m);
    std::cerr << "mesh: " << mesh->describe() << "\n";
    std::cerr << "cores: " << mesh->cores_layout() << "\n";
    local = std::move(mesh);
  }
  const dataset train_set =
      first_samples(language_model ? std::move(text.train) : load_fashion_mnist("train", o.data_dir), o.train_limit);
  const dataset test_set = language_model ? std::move(text.validation) : load_fashion_mnist("test", o.data_dir);
  train_config config = o.train;
  // A progress line rewritten in place while an epoch runs, on a terminal only (a log file gets the epoch lines).
  const bool progress = isatty(STDERR_FILENO) == 1 && !o.stage_log;
  config.log = [progress](const std::string& line) { std::cerr << (progress ? "\r\033[K" : "") << line << "\n"; };
  loss_curve curve;
  epoch_mean_points epoch_points;
  auto last_progress = std::chrono::steady_clock::time_point{};
  config.on_step = [&, progress, epochs = config.epochs](const step_progress& p) {
    if (!o.plot_file.empty()) {
      curve.steps.push_back({static_cast<double>(p.step), p.loss});
      epoch_points.add(p);
    }
    const auto now = std::chrono::steady_clock::now();
    if (progress && (now - last_progress > std::chrono::milliseconds(200) || p.steps_done == p.steps_total)) {
      last_progress = now;
      std::cerr << "\r\033[K" << progress_line(p, epochs) << std::flush;
    }
  };

  nlohmann::json out;
  std::ofstream trace_file;  // declared before the pipeline so it outlives it: its stages write the trace
  std::shared_ptr<chrome_trace_writer> trace;
  std::unique_ptr<data_parallel_pipeline> replicated;  // the pipeline's D replicas (--data-parallel with --stages)
  std::unique_ptr<pipeline> single_pipe;
  pipeline* pipe = nullptr;  // the pipeline (replica 0 of several) that describes the run
  step_runner* runner = nullptr;
  std::string partition = o.pipe.layers_per_chunk.empty() ? o.partition : "explicit";
  std::vector<double> predicted_busy;  // seconds per step and stage, from the measured layer costs
  double predicted_makespan = 0.0;     // seconds per step: the schedule simulated with the layer costs
  auto steps = std::make_shared<step_recorder>();  // fed by the stages (events of the latest step)
  if (o.stages > 0) {
    pipeline_options p = o.pipe;
    p.stages = o.stages;
    p.optimizer = o.optimizer;
    p.timeout = std::chrono::milliseconds(o.timeout_ms);
    p.compute_dtype = compute_dtype;
    p.custom_schedule = user_schedule;
    p.restart_wait = std::chrono::milliseconds(o.restart_wait_ms);
    p.log = [](const std::string& line) { std::cerr << line << "\n"; };
    // Note [bounded event log]: busy_s comes from the pipeline's busy sums; events are only streamed, to the
    // stage log and the trace as they come, never kept, so a long run stays flat.
    if (!o.trace_file.empty()) {
      trace_file.open(o.trace_file);
      if (!trace_file) throw std::runtime_error("cannot write the trace to " + o.trace_file);
      trace = std::make_shared<chrome_trace_writer>(trace_file, p.stages);
    }
    // The step recorder keeps one step's events: the measured makespan per step, and --timeline's last step.
    p.on_event = [trace, steps,
                  log = o.stage_log ? std::make_shared<stage_log_snapshots>(p.stages, p.chunks_per_stage) : nullptr](
                     const stage_event& e) {
      if (log) std::cerr << log->add(e);  // Note [seed's walkthrough]
      if (trace) trace->add(e);
      steps->add(e);
    };
    // Layer costs on one microbatch of training data: the time partition and every stage's predicted busy time.
    const std::size_t rows = std::min(train_set.size(), (config.batch_size + std::max(1, p.microbatches) - 1) /
                                                            static_cast<std::size_t>(std::max(1, p.microbatches)));
    const auto costs = measure_layer_costs(model, slice_rows(train_set.inputs, 0, std::max<std::size_t>(rows, 1)));
    if (p.layers_per_chunk.empty())
      p.layers_per_chunk = partition_counts(parse_partition_method(o.partition), model, costs,
                                            p.stages * p.chunks_per_stage);
    p.tensor_parallel = o.mesh.tensor_parallel;
    p.clip_grad_norm = o.mesh.clip_grad_norm;
    p.threads = o.threads;
    if (o.mesh.data_parallel > 1) {
      replicated = std::make_unique<data_parallel_pipeline>(model, p, o.mesh.data_parallel);
      pipe = &replicated->first();
      runner = replicated.get();
    } else {
      single_pipe = std::make_unique<pipeline>(model, p);
      pipe = single_pipe.get();
      runner = pipe;
    }
    predicted_busy = predicted_busy_s(costs, pipe->chunk_ranges(), p.stages, p.microbatches);
    predicted_makespan = simulate(pipe->schedule(), simulation_costs(costs, pipe->chunk_ranges(), p.stages)).makespan;
    std::cerr << "pipeline: " << p.stages << " stages, " << p.microbatches << " microbatches, schedule "
              << (user_schedule ? "from " + o.schedule_file : p.schedule) << ", partition " << partition << "\n";
    std::cerr << "mesh: " << describe_mesh(mesh_shape{o.mesh.data_parallel, p.stages, o.mesh.tensor_parallel}, p.nodes)
              << "\n";
    if (p.nodes.empty()) {  // Note [cores per rank]
      const std::vector<compute_cores> cores = replicated ? replicated->cores() : pipe->cores();
      std::cerr << "cores: "
                << cores_layout_text(rank_names(o.mesh.data_parallel, p.stages, o.mesh.tensor_parallel), cores,
                                     process_cores().size())
                << "\n";
    }
    const auto& ranges = pipe->chunk_ranges();
    for (std::size_t c = 0; c < ranges.size(); ++c)
      std::cerr << "  chunk " << c << " on stage " << stage_of_chunk(static_cast<int>(c), p.stages) << ": "
                << to_string(ranges[c]) << "\n";
    for (std::size_t c : chunks_without_parameters(model, ranges))  // Note [whole blocks]
      std::cerr << "  warning: chunk " << c << " (" << to_string(ranges[c])
                << ") holds no parameters: the model has fewer blocks (a Linear and its activation) than chunks\n";
    for (int s = 0; s < p.stages; ++s)
      std::cerr << "  stage " << s << ": predicted busy " << predicted_busy[static_cast<std::size_t>(s)] * 1e3
                << " ms per step\n";
  } else {
    // Every core by default, as PyTorch does. On a machine shared with other work, --threads 1 is steadier:
    // two OpenMP threads lost 4x (small MLP) when the other core was busy, since a preempted thread stalls
    // its partner at every barrier.
    set_compute_threads(o.threads > 0 ? o.threads : single_process_threads());
    if (!local) local = std::make_unique<local_runner>(model, o.optimizer, "cross_entropy", o.mesh.clip_grad_norm);
    runner = local.get();
  }

  if (!o.resume_file.empty()) {  // Note [resumed trajectory] in trainer.hpp
    const training_state at = runner->load_checkpoint(o.resume_file);
    config.start_step = at.step, config.start_epoch = at.epoch, config.start_batch = at.batch_in_epoch;
    if (config.seed != at.data_seed)
      std::cerr << "resume: data order seed " << at.data_seed << " from the checkpoint, not --seed " << config.seed
                << "\n";
    config.seed = at.data_seed;
    std::cerr << "resumed from " << o.resume_file << " at step " << at.step << " (epoch " << at.epoch + 1
              << ", batch " << at.batch_in_epoch << ")\n";
    out["resumed_at_step"] = at.step;
  }
  if (!o.checkpoint_file.empty())
    config.checkpoint = [&](const training_state& at) {
      training_state saved = at;
      saved.model_spec = o.model;
      runner->save_checkpoint(o.checkpoint_file, saved);
      std::cerr << "checkpoint of step " << saved.step << " written to " << o.checkpoint_file << "\n";
    };

  // A language model: validation loss in nats per byte (its labels are bytes) and bits per byte.
  const auto validate = [&](const std::string& when) {
    const double nats = evaluate_loss(*runner, test_set);
    std::cerr << when << ": validation loss " << nats << " nats/byte, " << nats / std::log(2.0) << " bits/byte\n";
    return nats;
  };
  if (language_model && o.eval_every) {
    config.evaluate_every = o.eval_every;
    config.evaluate = [&](std::uint64_t step) { validate("step " + std::to_string(step)); };
  }
  const train_report r = train(*runner, train_set, test_set, config);
  if (progress) std::cerr << "\r\033[K";
  if (!o.plot_file.empty() && !curve.steps.empty()) {
    curve.epochs = epoch_points.finish();
    std::ofstream plot(o.plot_file);
    plot << to_svg(curve, "loss per step and epoch mean: " + o.model + (o.stages ? ", " + std::to_string(o.stages) + " stages" : ""));
    if (!plot.flush()) throw std::runtime_error("cannot write the loss curve to " + o.plot_file);
    std::cerr << "loss curve written to " << o.plot_file << "\n";
  }
  if (language_model) {
    const double nats = validate("end");
    out["validation_loss"] = nats;
    out["bits_per_byte"] = nats / std::log(2.0);
    out["tokens_per_s"] = r.samples_per_s * static_cast<double>(text.context);
  }
  out["model"] = o.model;
  out["stages"] = o.stages;
  out["data_parallel"] = o.mesh.data_parallel;
  out["tensor_parallel"] = o.mesh.tensor_parallel;
  if (o.mesh.clip_grad_norm > 0.0f) out["clip_grad_norm"] = o.mesh.clip_grad_norm;
  out["dtype"] = dtype_name(compute_dtype);
  out["steps"] = r.steps;
  out["samples_per_s"] = r.samples_per_s;
  // Over this invocation's steps of its last epoch only (after --resume, not the whole epoch's): named so.
  out["last_epoch_mean_loss"] = r.final_loss;
  out["last_epoch_steps"] = r.final_loss_steps;
  out["last_step_loss"] = r.last_loss;
  out["test_accuracy"] = r.test_accuracy;
  out["wall_s"] = r.wall_s;
  if (pipe) {
    out["schedule"] = user_schedule ? "file:" + o.schedule_file : o.pipe.schedule;
    out["microbatches"] = o.pipe.microbatches;
    out["peak_stash"] = pipe->last_peak_stash();
    out["peak_stash_bytes"] = pipe->last_peak_stash_bytes();
    out["partition"] = partition;
    out["layers_per_chunk"] = chunk_layer_counts(pipe->chunk_ranges());
    out["predicted_busy_s"] = predicted_busy;  // per step, as busy_s
    auto busy = pipe->busy_seconds();
    for (std::size_t s = 0; s < busy.size(); ++s) {
      busy[s] /= static_cast<double>(std::max<std::size_t>(r.steps, 1));
      std::cerr << "stage " << s << ": busy " << busy[s] * 1e3 << " ms per step, predicted "
                << predicted_busy[s] * 1e3 << " ms\n";
    }
    out["busy_s"] = busy;
    out["predicted_makespan_s"] = predicted_makespan;  // per step
    out["makespan_s"] = steps->mean_makespan_s();       // per step, measured: first event to last action's end
    std::cerr << "step makespan " << steps->mean_makespan_s() * 1e3 << " ms, predicted " << predicted_makespan * 1e3
              << " ms\n";
    if (!o.timeline_file.empty() && !steps->last().empty()) {
      // The last step as it ran, above the same schedule simulated with that step's measured per-action costs.
      const measured_step m = measure_step(steps->last(), pipe->schedule());
      const simulation sim = simulate(pipe->schedule(), measured_costs(m, pipe->schedule()));
      std::ofstream svg(o.timeline_file);
      svg << timeline_svg(pipe->schedule(), m, sim);
      if (!svg.flush()) throw std::runtime_error("cannot write the timeline to " + o.timeline_file);
      const double ideal = m.busy / o.stages;
      out["timeline"] = {{"step", m.step},
                         {"measured_makespan_s", m.makespan},
                         {"simulated_makespan_s", sim.makespan},
                         {"measured_bubble", ideal > 0 ? m.makespan / ideal - 1.0 : 0.0},
                         {"simulated_bubble", sim.bubble}};
      std::cerr << "timeline of step " << m.step << " written to " << o.timeline_file << ": measured makespan "
                << m.makespan * 1e3 << " ms, simulated with its costs " << sim.makespan * 1e3 << " ms\n";
    }
    if (!o.pipe.nodes.empty()) out["restarts"] = pipe->restarts();
    if (trace) {
      trace->finish();
      if (!trace_file) throw std::runtime_error("cannot write the trace to " + o.trace_file);
      std::cerr << "trace written to " << o.trace_file << "\n";
    }
  }
  if (!o.export_file.empty()) {  // Note [exported weights]
    sequential trained = pipe ? pipe->gather_model() : model.clone();
    export_weights(o.export_file, trained, compute_dtype);
    std::cerr << "weights written to " << o.export_file << " in " << dtype_name(compute_dtype) << "\n";
  }
  std::cout << out.dump() << std::endl;
}

}  // namespace

void add_train_command(CLI::App& app) {
  auto o = std::make_shared<train_options>();
  o->optimizer.kind = "adam";
  o->optimizer.lr = 1e-3f;
  auto* cmd = app.add_subcommand("train", "train a model on Fashion-MNIST (single process, or a pipeline with --stages)");
  // Every numeric flag is checked on its text (whole_number, real_number: cli/checks.hpp), so a negative
  // count is refused, naming the flag, instead of wrapping into a huge unsigned number.
  cmd->add_option("--model", o->model, "layer widths, Linear layers with activations between (784-512-10), or gpt:layers=8,dim=256,heads=8,context=128 (trains on --text)")->capture_default_str();
  cmd->add_option("--activation", o->activation, "relu, gelu, tanh or sigmoid")
      ->check(CLI::IsMember({"relu", "gelu", "tanh", "sigmoid"}))
      ->capture_default_str();
  cmd->add_option("--epochs", o->train.epochs)->check(whole_number(1))->capture_default_str();
  cmd->add_option("--batch-size", o->train.batch_size)->check(whole_number(1))->capture_default_str();
  cmd->add_option("--max-steps", o->train.max_steps, "stop once this many steps are taken, a resumed checkpoint's included (0: whole epochs)")
      ->check(whole_number(0))
      ->capture_default_str();
  cmd->add_option("--seed", o->train.seed, "data order seed")->check(whole_number(0))->capture_default_str();
  cmd->add_option("--init-seed", o->init_seed, "weight initialisation seed")->check(whole_number(0))->capture_default_str();
  cmd->add_option("--optimizer", o->optimizer.kind, "sgd, adam or adamw")
      ->check(CLI::IsMember({"sgd", "adam", "adamw"}))
      ->capture_default_str();
  cmd->add_option("--lr", o->optimizer.lr)->check(real_number(0, false))->capture_default_str();
  cmd->add_option("--momentum", o->optimizer.momentum)->check(real_number(0, true, 1))->capture_default_str();
  cmd->add_option("--weight-decay", o->optimizer.weight_decay)->check(real_number(0, true))->capture_default_str();
  cmd->add_option("--divergence-factor", o->train.divergence_factor,
                  "stop when a step's loss exceeds this times max(first step's loss, 1) (0: never; Note [divergence])")
      ->check(real_number(0, true))
      ->capture_default_str();
  cmd->add_option("--dtype", o->dtype,
                  "compute dtype: fp32, or bf16 (bf16 GEMMs and stashed activations, fp32 master weights and optimizer)")
      ->check(dtype_name())
      ->capture_default_str();
  cmd->add_option("--data", o->data_dir, "directory of the Fashion-MNIST IDX files")->capture_default_str();
  const std::vector<const CLI::Option*> text_only = {
      cmd->add_option("--text", o->text_path, "a gpt model's text: a file or a folder of files (byte tokens)")
          ->capture_default_str(),
      cmd->add_option("--eval-every", o->eval_every, "a gpt model's validation loss every N steps (0: at the end only)")
          ->check(whole_number(0))
          ->capture_default_str(),
      cmd->add_option("--validation-windows", o->validation_windows, "at most this many windows of validation text")
          ->check(whole_number(1))
          ->capture_default_str(),
  };
  cmd->add_option("--train-limit", o->train_limit, "use only the first N training samples")
      ->check(whole_number(0))
      ->capture_default_str();
  auto* stages = cmd->add_option("--stages", o->stages, "pipeline stages (0: single process, no actors)")
                     ->check(whole_number(0, 4096))
                     ->capture_default_str();
  cmd->add_option("--threads", o->threads, "intra-op threads of every compute rank: the single process, each stage, each data- or "
                  "tensor-parallel rank (pinned to their own cores where they fit); 0: this machine's cores divided "
                  "evenly among the ranks")
      ->check(CLI::Range(0, 256))
      ->capture_default_str();
  // The (data, pipeline, tensor) mesh: with --stages, every stage runs T ranks and the pipeline D replicas.
  cmd->add_option("--data-parallel", o->mesh.data_parallel,
                  "replicas of the model (or of the whole pipeline, with --stages), each on its share of every batch "
                  "(threads of this process)")
      ->check(whole_number(1, 256))
      ->capture_default_str();
  cmd->add_option("--tensor-parallel", o->mesh.tensor_parallel,
                  "ranks each replica's (or each stage's) Linear pairs are split over (Megatron: column -> activation "
                  "-> row); threads, on the stage's node with --nodes")
      ->check(whole_number(1, 256))
      ->capture_default_str();
  cmd->add_option("--clip-grad-norm", o->mesh.clip_grad_norm,
                  "clip gradients to this global norm over every stage, rank and replica (0: no clipping)")
      ->check(real_number(0, true))
      ->capture_default_str();
  // Pipeline-only flags: refused without --stages (below) rather than silently ignored.
  std::string schedules;
  for (const auto& n : schedule_names()) schedules += (schedules.empty() ? "" : ", ") + n;
  const std::vector<const CLI::Option*> pipeline_only = {
      cmd->add_option("--microbatches", o->pipe.microbatches)->check(whole_number(1, 1 << 20))->capture_default_str(),
      cmd->add_option("--schedule", o->pipe.schedule, schedules)
          ->check(CLI::IsMember(schedule_names()))
          ->capture_default_str(),
      cmd->add_option("--schedule-file", o->schedule_file,
                      "run this schedule (a grid, or CSV by the .csv extension, as `schedule --file` reads), validated "
                      "against --stages, --microbatches and --chunks before training")
          ->check(CLI::ExistingFile),
      cmd->add_option("--chunks", o->pipe.chunks_per_stage, "chunks per stage (interleaved)")
          ->check(whole_number(1, 4096))
          ->capture_default_str(),
      cmd->add_option("--partition", o->partition, "uniform, params (balance parameters) or time (balance measured layer time)")
          ->check(CLI::IsMember({"uniform", "params", "time"}))
          ->capture_default_str(),
      cmd->add_option("--layers-per-chunk", o->pipe.layers_per_chunk, "explicit partition: layer count of every chunk, as 2,2,3 (overrides --partition)")
          ->delimiter(',')
          ->check(whole_number(1)),
      cmd->add_option("--timeout-ms", o->timeout_ms, "longest wait on a peer")
          ->check(whole_number(1, 1000000000))
          ->capture_default_str(),
      cmd->add_option("--nodes", o->pipe.nodes, "host:port,... of `actorpipe node` processes: stage s on node s % count")
          ->delimiter(',')
          ->needs(stages),
      cmd->add_option("--trace", o->trace_file, "write a Chrome trace (JSON) of the stages' tasks"),
      cmd->add_option("--timeline", o->timeline_file,
                      "write the last step as it ran (real durations, transfers, idle) above the schedule simulated "
                      "with its measured per-action costs (SVG)"),
      cmd->add_flag("--stage-log", o->stage_log, "print seed 000's walkthrough while training: every stage's current task and queue after each change"),
  };
  cmd->get_option("--schedule-file")->excludes(cmd->get_option("--schedule"));
  cmd->add_option("--plot", o->plot_file, "write the loss curve (every step's loss and each epoch's mean) as SVG");
  auto* nodes = cmd->get_option("--nodes");
  for (CLI::Option* t : add_transport_flags(cmd, o->pipe.security)) t->needs(nodes);  // checked in run_train
  // Note [recovery] in actors/pipeline.cpp.
  const std::string recovery = "Recovery from a lost node (with --nodes)";
  cmd->add_option("--restart-on-failure", o->pipe.restart_on_failure,
                  "times a lost node is waited for (or a replacement at its address), every stage restored from the "
                  "last snapshot and the run continued; 0: fail at once")
      ->check(whole_number(0, 1000000))
      ->capture_default_str()
      ->group(recovery)
      ->needs(nodes);
  cmd->add_option("--restart-wait-ms", o->restart_wait_ms, "how long each recovery waits for the nodes")
      ->check(whole_number(1, 1000000000))
      ->capture_default_str()
      ->group(recovery)
      ->needs(nodes);
  cmd->add_option("--snapshot-every", o->pipe.snapshot_every,
                  "steps between in-memory snapshots of every stage (the steps since are replayed after a restore)")
      ->check(whole_number(1, 1000000))
      ->capture_default_str()
      ->group(recovery)
      ->needs(nodes);
  cmd->add_option("--checkpoint", o->checkpoint_file, "write a checkpoint (safetensors) there at the end, and every --checkpoint-every steps");
  cmd->add_option("--checkpoint-every", o->train.checkpoint_every, "steps between checkpoints (0: only at the end)")
      ->check(whole_number(0))
      ->capture_default_str();
  cmd->add_option("--export", o->export_file, "write the trained weights (no optimizer state) in --dtype to this safetensors file");
  cmd->add_option("--resume", o->resume_file, "continue training from this checkpoint: its weights, optimizer state, step and data position");
  cmd->callback([o, pipeline_only, text_only] {
    if (o->stages == 0) refuse_given(pipeline_only, "needs --stages N (N >= 1): it only applies to a pipeline");
    if (!is_gpt_spec(o->model)) refuse_given(text_only, "needs a gpt model (--model gpt:...): it only applies to text");
    else parse_gpt_spec(o->model);  // a bad spec is refused before any data is read
    run_train(*o);
  });
}

}  // namespace ap::cli

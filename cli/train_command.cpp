// `actorpipe train`: trains a Sequential on Fashion-MNIST (a GPT on text), in one process or on a pipeline of
// stage actors, and ends with one JSON line (samples_per_s, last_epoch_mean_loss, last_step_loss, test_accuracy,
// wall_s, ...; a GPT adds validation_loss, bits_per_byte, tokens_per_s). This file holds the flags and
// run_train; the parts run_train calls live in cli/train_*.cpp (cli/train_run.hpp).
#include <iostream>
#include <memory>

#include "cli/checks.hpp"
#include "cli/commands.hpp"
#include "cli/rendezvous.hpp"
#include "cli/train_run.hpp"
#include "cli/transport_flags.hpp"
#include "model/gpt_spec.hpp"
#include "schedule/schedule.hpp"
#include "tensor/compute.hpp"
#include "tensor/matmul.hpp"

namespace ap::cli {
namespace {

void run_train(train_options o) {
  std::optional<schedule> user_schedule = check_train_flags(o);  // every check before any work
  set_compute_threads(1);
  train_plan plan = plan_model(o, std::move(user_schedule));
  if (plan.compute_dtype == dtype::bfloat16 && current_compute_backend() == compute_backend::onednn && !onednn_avx512())
    std::cerr << "bf16: this machine's processor has no AVX-512, so oneDNN makes no bf16 products here: they run in "
                 "fp32 on the bf16 values (the same results up to the order of sums; the memory saved, not the time)\n";
  std::unique_ptr<step_runner> mesh;
  if (o.auto_config) {  // measured on the data, so the data comes first; --auto only picks a split that works
    plan_data(o, plan);
    choose_configuration(o, plan);
    if (o.stages == 0)
      for (const std::string& flag : o.pipeline_flags)
        std::cerr << "auto: " << flag << " applies only to a pipeline: unused\n";
    mesh = make_mesh_runner(o, plan.model);
  } else {
    mesh = make_mesh_runner(o, plan.model);  // before the data: a bad split fails at once
    plan_data(o, plan);
  }
  train_runner runner = build_train_runner(o, plan, std::move(mesh));
  const train_outcome outcome = run_training(o, plan, *runner.runner);
  report_training(o, plan, runner, outcome);
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
  cmd->add_option("--recompute", o->recompute,
                  "none, or blocks: every block keeps only its input and runs its forward again in the backward "
                  "(less activation memory, one more forward; same gradients bit for bit)")
      ->check(CLI::IsMember({"none", "blocks"}))
      ->capture_default_str();
  cmd->add_option("--max-memory", o->max_memory,
                  "what one process may hold, e.g. 2G or 512M: this one for stages and replicas in it, each node for "
                  "the stages on it; a plan predicted over it (weights, gradients, optimizer state, stash) is refused "
                  "before any step (Note [memory budget])");
  cmd->add_option("--sequence-lengths", o->train.sequence_lengths,
                  "a gpt model: train each batch on the first L positions of its windows, L one of these (e.g. "
                  "32,64,128) chosen per step from --seed (Note [sequence lengths]); each at most the context")
      ->delimiter(',')
      ->check(whole_number(1));
  auto* auto_flag = cmd->add_flag("--auto", o->auto_config,
                "choose the mesh: measure the model's layer costs on this machine's cores, predict every "
                "configuration that fits them and --max-memory (single process or pipeline; stages, microbatches, "
                "schedule, chunks, partition, data- and tensor-parallel ranks, threads, recomputation), print the "
                "best few and train with the best (Note [automatic configuration]); with --nodes or --rendezvous env, "
                "a pipeline on the nodes fitting their machines' cores (Note [auto on nodes])");
  cmd->add_option("--auto-trials", o->auto_trials,
                  "with --auto: run the best N predicted configurations for a few steps each and train with the "
                  "fastest as measured (0: the best predicted; Note [auto trials])")
      ->check(whole_number(0, 100))
      ->capture_default_str()
      ->needs(auto_flag);
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
  cmd->add_option("--stages", o->stages, "pipeline stages (0: single process, no actors)")
      ->check(whole_number(0, 4096))
      ->capture_default_str();
  cmd->add_option("--threads", o->threads, "intra-op threads of every compute rank: the single process, each stage, each data- or "
                  "tensor-parallel rank (pinned to their own cores where they fit); 0: this machine's cores divided "
                  "evenly among the ranks, or among the stages of a pipeline alone in this process by their predicted "
                  "busy time (Note [cores by stage cost])")
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
      cmd->add_option("--partition", o->partition, "params (balance parameters, as DeepSpeed by default: a GPT's blocks evenly, its embeddings on the first stage and its head on the last), uniform (as many whole blocks each) or time (balance measured layer time)")
          ->check(CLI::IsMember({"uniform", "params", "time"}))
          ->capture_default_str(),
      cmd->add_option("--layers-per-chunk", o->pipe.layers_per_chunk, "explicit partition: layer count of every chunk, as 2,2,3 (overrides --partition)")
          ->delimiter(',')
          ->check(whole_number(1)),
      cmd->add_option("--timeout-ms", o->timeout_ms, "longest wait on a peer")
          ->check(whole_number(1, 1000000000))
          ->capture_default_str(),
      cmd->add_option("--nodes", o->pipe.nodes,
                      "host:port,... of `actorpipe node` processes: stage s on node s % count (with --stages, or "
                      "--auto: Note [auto on nodes])")
          ->delimiter(','),
      cmd->add_option("--trace", o->trace_file, "write a Chrome trace (JSON) of the stages' tasks"),
      cmd->add_option("--timeline", o->timeline_file,
                      "write the last step as it ran (real durations, transfers, idle) above the schedule simulated "
                      "with its measured per-action costs (SVG)"),
      cmd->add_flag("--stage-log", o->stage_log, "print seed 000's walkthrough while training: every stage's current task and queue after each change"),
  };
  cmd->get_option("--schedule-file")->excludes(cmd->get_option("--schedule"));
  cmd->add_option("--plot", o->plot_file, "write the loss curve (every step's loss and each epoch's mean) as SVG");
  auto* nodes = cmd->get_option("--nodes");
  std::vector<const CLI::Option*> transport;  // checked in run_train; given, they need --nodes or --rendezvous
  for (CLI::Option* t : add_transport_flags(cmd, o->pipe.security)) transport.push_back(t);
  auto* rendezvous =
      cmd->add_option("--rendezvous", o->rendezvous,
                      "env: one command per process starts the job: the rank, the job's size and rank 0's address from "
                      "the environment (torchrun's RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, or Slurm's "
                      "SLURM_PROCID, SLURM_NTASKS, SLURM_STEP_NODELIST); rank 0 trains the pipeline, every other rank is "
                      "a node of it (Note [environment rendezvous])")
          ->check(CLI::IsMember({"env"}))
          ->excludes(nodes);
  // Note [recovery] in actors/pipeline.cpp.
  const std::string recovery = "Recovery from a lost node (with --nodes or --rendezvous env)";
  cmd->add_option("--collectives", o->collectives,
                  "what runs the all-reduces of data-parallel replicas on nodes (Note [collective backends]): ring "
                  "(ours, on data links with the nodes' security, mutual TLS or not), gloo (PyTorch's CPU library, "
                  "plain TCP only: needs --insecure), by-size (the ring below 4 MB, gloo from 4 MB; needs --insecure), "
                  "or auto (the ring)")
      ->check(CLI::IsMember({"auto", "ring", "gloo", "by-size"}))
      ->capture_default_str();
  cmd->add_option("--restart-on-failure", o->pipe.restart_on_failure,
                  "times a lost node is waited for (or a replacement at its address), every stage restored from the "
                  "last snapshot and the run continued; 0: fail at once")
      ->check(whole_number(0, 1000000))
      ->capture_default_str()
      ->group(recovery);
  cmd->add_option("--restart-wait-ms", o->restart_wait_ms, "how long each recovery waits for the nodes")
      ->check(whole_number(1, 1000000000))
      ->capture_default_str()
      ->group(recovery);
  cmd->add_option("--snapshot-every", o->pipe.snapshot_every,
                  "steps between in-memory snapshots of every stage (the steps since are replayed after a restore)")
      ->check(whole_number(1, 1000000))
      ->capture_default_str()
      ->group(recovery);
  cmd->add_option("--checkpoint", o->checkpoint_file, "write a checkpoint (safetensors) there at the end, and every --checkpoint-every steps");
  cmd->add_option("--checkpoint-every", o->train.checkpoint_every, "steps between checkpoints (0: only at the end)")
      ->check(whole_number(0))
      ->capture_default_str();
  cmd->add_option("--export", o->export_file, "write the trained weights (no optimizer state) in --dtype to this safetensors file");
  cmd->add_option("--resume", o->resume_file, "continue training from this checkpoint: its weights, optimizer state, step and data position");
  // What --auto chooses, refused beside it rather than silently overridden.
  std::vector<const CLI::Option*> chosen_by_auto;
  for (const char* name : {"--stages", "--threads", "--data-parallel", "--tensor-parallel", "--microbatches", "--schedule",
                           "--schedule-file", "--chunks", "--partition", "--layers-per-chunk", "--recompute"})
    chosen_by_auto.push_back(cmd->get_option(name));
  std::vector<const CLI::Option*> recovery_flags;
  for (const char* name : {"--restart-on-failure", "--restart-wait-ms", "--snapshot-every"})
    recovery_flags.push_back(cmd->get_option(name));
  cmd->callback([o, pipeline_only, text_only, chosen_by_auto, transport, recovery_flags, rendezvous] {
    for (const CLI::Option* flag : pipeline_only)
      if (flag->count() > 0) o->pipeline_flags.push_back(flag->get_name());
    if (o->auto_config)
      refuse_given(chosen_by_auto, "is chosen by --auto (Note [automatic configuration]): give one or the other");
    else if (o->stages == 0)
      refuse_given(pipeline_only, "needs --stages N (N >= 1): it only applies to a pipeline");
    if (!is_gpt_spec(o->model)) refuse_given(text_only, "needs a gpt model (--model gpt:...): it only applies to text");
    else parse_gpt_spec(o->model);  // a bad spec is refused before any data is read
    if (o->pipe.nodes.empty() && o->rendezvous.empty()) {
      refuse_given(transport, "requires --nodes or --rendezvous env: it secures the connections to nodes");
      refuse_given(recovery_flags, "requires --nodes or --rendezvous env: it recovers from a lost node");
    }
    if (o->rendezvous.empty()) return run_train(*o);
    const rendezvous_env env = rendezvous_place();  // Note [environment rendezvous]
    if (env.rank > 0) {
      node_run_options node;
      node.security = o->pipe.security;
      return run_rendezvous_node(env, node);
    }
    if (o->stages == 0 && !o->auto_config)
      throw std::invalid_argument("--rendezvous env: rank 0 trains a pipeline on the other ranks: it needs --stages N "
                                  "or --auto");
    check_transport_security(o->pipe.security, "train --rendezvous");  // before waiting for anyone
    run_rendezvous_coordinator(env, [&](std::vector<std::string> nodes) {
      o->pipe.nodes = std::move(nodes);
      run_train(*o);
    });
  });
}

}  // namespace ap::cli

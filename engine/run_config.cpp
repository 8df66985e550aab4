#include "engine/run_config.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>

#include "engine/value_checks.hpp"
#include "network/rendezvous.hpp"
#include "model/gpt_spec.hpp"
#include "schedule/schedule.hpp"

namespace ap {

bool run_config::language_model() const { return is_gpt_spec(model); }

void for_each_config_key(run_config& c, const std::function<void(const config_key&, config_field)>& visit) {
  const auto key = [&](const char* name, config_field field, const char* help, value_check check = {},
                       const char* group = "", bool pipeline_only = false) {
    visit(config_key{name, help, std::move(check), group, pipeline_only}, field);
  };
  const auto any = value_check{};
  const char* model = "Model";
  key("model", &c.model,
      "layer widths, Linear layers with activations between (784-512-10), a gpt spec "
      "(gpt:layers=8,dim=256,heads=8,context=128,vocab=256; LLaMA-style keys pos=rope, kv_heads=K, act=swiglu) or a "
      "preset (gpt2, gpt2-medium, gpt2-tiny, llama, llama-tiny; keys override: gpt2:context=256); a gpt trains on a "
      "token file or text",
      any, model);
  key("activation", &c.activation, "relu, gelu, tanh or sigmoid", one_of_check({"relu", "gelu", "tanh", "sigmoid"}),
      model);
  key("init-seed", &c.init_seed, "weight initialisation seed", whole_number_check(0), model);
  key("init-from", &c.init_from_file,
      "start from GPT-2's weights: llm.c's checkpoint (gpt2_124M.bin) or Hugging Face's model.safetensors, told apart "
      "by content; --model a GPT-2-shaped gpt spec of the same shape (a shorter context takes the first positions), "
      "or left out: the file's",
      any, model);
  key("loss", &c.loss, "a registered loss (cross_entropy, or one a linked package registers)", any, model);
  key("dtype", &c.dtype, "compute dtype: fp32, or bf16 (bf16 GEMMs and stashed activations, fp32 master weights and optimizer)",
      dtype_check(), model);
  key("recompute", &c.recompute,
      "none, or blocks: every block keeps only its input and runs its forward again in the backward (same gradients)",
      one_of_check({"none", "blocks"}), model);

  const char* data = "Data";
  key("data", &c.data.path,
      "training data: a folder of IDX files (Fashion-MNIST, the default for a classifier), features.npy (with --labels), "
      "a CSV file with a header, or a token file for a gpt (llm.c .bin by its magic, raw uint16/uint32 otherwise)",
      any, data);
  key("labels", &c.data.labels, "the .npy labels of .npy features (one class id per row)", any, data);
  key("validation", &c.data.validation,
      "validation data of the same format (a token file's default: its last --validation-fraction)", any, data);
  key("validation-labels", &c.data.validation_labels, "the .npy labels of --validation", any, data);
  key("label-column", &c.data.label_column, "a CSV file's label column, by its header name", any, data);
  key("data-format", &c.data.format, "the reader, instead of by magic or extension: idx, npy, csv, tokens, llmc or text",
      [](const std::string& t) { return t.empty() ? std::string() : one_of_check({"idx", "npy", "csv", "tokens", "llmc", "text"})(t); },
      data);
  key("token-bytes", &c.data.token_bytes, "bytes per token of a raw token file: 2 (uint16) or 4 (uint32)",
      one_of_check({"2", "4"}), data);
  key("vocab-size", &c.data.vocab_size, "token ids must be below it (0: the model's vocabulary)", whole_number_check(0), data);
  key("validation-fraction", &c.data.validation_fraction,
      "a token file without --validation: the last fraction of its tokens validates", real_number_check(0, true, 1), data);
  key("train-limit", &c.data.limit, "use only the first N training samples (0: all)", whole_number_check(0), data);
  key("text", &c.text_path, "a gpt model's text: a file or a folder of files (byte tokens; default: the fortunes)", any,
      data);
  key("eval-every", &c.eval_every, "a language model's validation loss every N steps (0: at the end only)",
      whole_number_check(0), data);
  key("validation-windows", &c.validation_windows, "at most this many windows of a language model's validation data",
      whole_number_check(1), data);
  key("sequence-lengths", &c.train.sequence_lengths,
      "a gpt model: train each batch on the first L positions of its windows, L one of these (e.g. 32,64,128) "
      "chosen per step from --seed (Note [sequence lengths]); each at most the context",
      whole_number_check(1), data);

  const char* training = "Training";
  key("epochs", &c.train.epochs, "", whole_number_check(1), training);
  key("batch-size", &c.train.batch_size, "", whole_number_check(1), training);
  key("max-steps", &c.train.max_steps, "stop once this many steps are taken, a resumed checkpoint's included (0: whole epochs)",
      whole_number_check(0), training);
  key("seed", &c.train.seed, "data order seed", whole_number_check(0), training);
  key("divergence-factor", &c.train.divergence_factor,
      "stop when a step's loss exceeds this times max(first step's loss, 1) (0: never; Note [divergence])",
      real_number_check(0, true), training);
  key("optimizer", &c.optimizer.kind, "sgd, adam or adamw", one_of_check({"sgd", "adam", "adamw"}), training);
  key("lr", &c.optimizer.lr, "the peak learning rate", real_number_check(0, false), training);
  key("momentum", &c.optimizer.momentum, "sgd's", real_number_check(0, true, 1), training);
  key("weight-decay", &c.optimizer.weight_decay, "", real_number_check(0, true), training);
  key("beta1", &c.optimizer.beta1, "adam and adamw: the first moment's decay", real_number_check(0, true, 1), training);
  key("beta2", &c.optimizer.beta2, "adam and adamw: the second moment's decay (GPT-2 and nanoGPT runs take 0.95)",
      real_number_check(0, true, 1), training);
  key("lr-schedule", &c.optimizer.schedule.kind,
      "constant, cosine or linear (decay to --min-lr at --decay-steps), or step (x --lr-gamma every --lr-step-size); "
      "after --warmup-steps of linear warmup",
      one_of_check({"constant", "cosine", "linear", "step"}), training);
  key("warmup-steps", &c.optimizer.schedule.warmup_steps, "steps of linear warmup from 0 to --lr", whole_number_check(0),
      training);
  key("decay-steps", &c.optimizer.schedule.decay_steps,
      "cosine and linear: the step at which the lr reaches --min-lr (0: the run's last step)", whole_number_check(0),
      training);
  key("min-lr", &c.optimizer.schedule.min_lr, "cosine and linear: the lr at the end of the decay",
      real_number_check(0, true), training);
  key("lr-step-size", &c.optimizer.schedule.step_size, "step: steps between decays", whole_number_check(0), training);
  key("lr-gamma", &c.optimizer.schedule.gamma, "step: the factor at each decay", real_number_check(0, false), training);
  key("clip-grad-norm", &c.mesh.clip_grad_norm, "clip gradients to this global norm over every stage, rank and replica (0: no clipping)",
      real_number_check(0, true), training);

  const char* mesh = "Mesh";
  key("stages", &c.stages, "pipeline stages (0: single process, no actors)", whole_number_check(0, 4096), mesh);
  key("threads", &c.threads,
      "intra-op threads of every compute rank (0: this machine's cores divided among the ranks, or among a pipeline's "
      "stages by their predicted busy time: Note [cores by stage cost])",
      whole_number_check(0, 256), mesh);
  key("data-parallel", &c.mesh.data_parallel, "replicas of the model (or of the whole pipeline), each on its share of every batch",
      whole_number_check(1, 256), mesh);
  key("tensor-parallel", &c.mesh.tensor_parallel,
      "ranks each replica's (or each stage's) Linear pairs are split over (column -> activation -> row)",
      whole_number_check(1, 256), mesh);
  key("sequence-parallel", &c.mesh.sequence_parallel,
      "with --tensor-parallel: the ranks divide the rows of the blocks between their split Linears (norms, residuals) "
      "instead of each computing all of them (Note [sequence parallelism])",
      any, mesh);
  key("max-memory", &c.max_memory,
      "what one process may hold, e.g. 2G or 512M; a plan predicted over it is refused before any step (Note [memory budget])",
      any, mesh);
  key("auto", &c.auto_config,
      "choose the mesh from measured layer costs, this machine's cores (or the nodes') and --max-memory; the best few "
      "predicted are tried and the fastest trains (Note [automatic configuration])",
      any, mesh);
  key("auto-trials", &c.auto_trials, "with --auto: the best N predicted configurations tried for a few steps each",
      whole_number_check(0, 100), mesh);

  const char* pipeline = "Pipeline (with --stages)";
  std::vector<std::string> schedules = schedule_names();
  key("microbatches", &c.pipe.microbatches, "", whole_number_check(1, 1 << 20), pipeline, true);
  key("schedule", &c.pipe.schedule, "gpipe, 1f1b, interleaved, zb-h1, ...", one_of_check(schedules), pipeline, true);
  key("schedule-file", &c.schedule_file,
      "run this schedule (a grid, or CSV by the .csv extension), validated against the stages, microbatches and chunks",
      any, pipeline, true);
  key("chunks", &c.pipe.chunks_per_stage, "chunks per stage (interleaved)", whole_number_check(1, 4096), pipeline, true);
  key("partition", &c.partition,
      "params (balance parameters), uniform (as many whole blocks each) or time (balance measured layer time)",
      one_of_check({"uniform", "params", "time"}), pipeline, true);
  key("layers-per-chunk", &c.pipe.layers_per_chunk, "explicit partition: layer count of every chunk, as 2,2,3",
      whole_number_check(1), pipeline, true);
  key("timeout-ms", &c.timeout_ms, "longest wait on a peer", whole_number_check(1, 1000000000), pipeline, true);
  key("nodes", &c.pipe.nodes, "host:port,... of `actorpipe node` processes: stage s on node s % count", any, pipeline, true);
  key("trace", &c.trace_file, "write a Chrome trace (JSON) of the stages' tasks", any, pipeline, true);
  key("timeline", &c.timeline_file, "write the last step as it ran above its simulation (SVG)", any, pipeline, true);
  key("stage-log", &c.stage_log, "print every stage's current task and queue after each change", any, pipeline, true);

  const char* cluster = "Cluster (with --nodes or --rendezvous env)";
  key("rendezvous", &c.rendezvous,
      "env: one command per process starts the job (torchrun's RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, or Slurm's); "
      "rank 0 trains, every other rank is a node (Note [environment rendezvous])",
      [](const std::string& t) { return t.empty() ? std::string() : one_of_check({"env"})(t); }, cluster);
  static_assert(default_rendezvous_timeout == std::chrono::seconds(120),
                "run_config::rendezvous_timeout_s's default is default_rendezvous_timeout");
  key("rendezvous-timeout", &c.rendezvous_timeout_s,
      "with --rendezvous env: seconds rank 0 waits for every node to register, and a node for rank 0 to answer (the "
      "ranks of a job start within this of each other; Note [rendezvous fails fast])",
      whole_number_check(1, 1000000), cluster);
  key("tls-ca", &c.pipe.security.ca_file, "PEM certificate of the CA that signs every node's and coordinator's certificate",
      any, cluster);
  key("tls-cert", &c.pipe.security.certificate_file, "this process's PEM certificate, signed by --tls-ca", any, cluster);
  key("tls-key", &c.pipe.security.key_file, "the private key of --tls-cert (PEM, unencrypted)", any, cluster);
  key("insecure", &c.pipe.security.insecure, "plain TCP: no authentication, no encryption (trusted networks, tests)", any,
      cluster);
  key("collectives", &c.collectives,
      "the replicas' all-reduces between nodes: ring (ours, with the nodes' security), gloo (plain TCP: needs "
      "--insecure), by-size (ring below 4 MB, gloo above; needs --insecure) or auto (the ring)",
      one_of_check({"auto", "ring", "gloo", "by-size"}), cluster);
  key("restart-on-failure", &c.pipe.restart_on_failure,
      "times a lost node is waited for (or a replacement at its address) and the run continued from the last snapshot",
      whole_number_check(0, 1000000), cluster);
  key("restart-wait-ms", &c.restart_wait_ms, "how long each recovery waits for the nodes", whole_number_check(1, 1000000000),
      cluster);
  key("elastic", &c.elastic,
      "when a lost node does not come back (after --restart-on-failure's waits), go on with the nodes that answer, down "
      "to this many, from the last --checkpoint; nodes that answer again are taken back at a checkpoint (0: off; Note "
      "[elastic runs])",
      whole_number_check(0, 1000000), cluster);
  key("snapshot-every", &c.pipe.snapshot_every, "steps between in-memory snapshots of every stage",
      whole_number_check(1, 1000000), cluster);

  const char* outputs = "Outputs";
  key("checkpoint", &c.checkpoint_file, "write a checkpoint (safetensors) there at the end, and every --checkpoint-every steps",
      any, outputs);
  key("checkpoint-every", &c.train.checkpoint_every, "steps between checkpoints (0: only at the end)", whole_number_check(0),
      outputs);
  key("resume", &c.resume_file, "continue from this checkpoint: its weights, optimizer state, step and data position", any,
      outputs);
  key("export", &c.export_file, "write the trained weights (no optimizer state) in --dtype to this safetensors file", any,
      outputs);
  key("export-as", &c.export_as_file,
      "write the trained weights as GPT-2's at the end: llm.c's checkpoint (.bin) or Hugging Face's model.safetensors "
      "(.safetensors), by the name's extension",
      any, outputs);
  key("log", &c.log_file, "append one JSON line per step and per validation to this file (Note [metrics log])", any, outputs);
  key("plot", &c.plot_file, "write the loss curve (every step's loss and each epoch's mean) as SVG", any, outputs);
}

namespace {

// The line of `text` where the top-level key `name` is written, or 0.
std::size_t line_of_key(const std::string& text, const std::string& name) {
  const std::string quoted = "\"" + name + "\"";
  for (std::size_t at = text.find(quoted); at != std::string::npos; at = text.find(quoted, at + 1)) {
    std::size_t after = at + quoted.size();
    while (after < text.size() && (text[after] == ' ' || text[after] == '\t' || text[after] == '\n' || text[after] == '\r'))
      ++after;
    if (after < text.size() && text[after] == ':')
      return 1 + static_cast<std::size_t>(std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(at), '\n'));
  }
  return 0;
}

// A JSON value as the text a flag would carry ("128", "0.001", "adam"), or "" when its type does not fit.
std::string as_text(const config_document& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number_unsigned()) return std::to_string(v.get<std::uint64_t>());
  if (v.is_number_integer()) return std::to_string(v.get<std::int64_t>());
  if (v.is_number_float()) {
    std::ostringstream s;
    s.precision(17);
    s << v.get<double>();
    return s.str();
  }
  return "";
}

std::string type_name(const config_document& v) { return v.type_name(); }

// Sets `field` from `v` after `check`; returns "" or why not.
std::string set_field(config_field field, const config_document& v, const value_check& check) {
  const auto checked = [&](const std::string& text) { return check ? check(text) : std::string(); };
  return std::visit(
      [&](auto* f) -> std::string {
        using T = std::remove_pointer_t<decltype(f)>;
        if constexpr (std::is_same_v<T, std::string>) {
          if (!v.is_string()) return "expected a string, got " + type_name(v) + " " + v.dump();
          if (auto why = checked(v.get<std::string>()); !why.empty()) return why;
          *f = v.get<std::string>();
        } else if constexpr (std::is_same_v<T, bool>) {
          if (!v.is_boolean()) return "expected true or false, got " + type_name(v) + " " + v.dump();
          *f = v.get<bool>();
        } else if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
          if (!v.is_number()) return "expected a number, got " + type_name(v) + " " + v.dump();
          if (auto why = checked(as_text(v)); !why.empty()) return why;
          *f = static_cast<T>(v.get<double>());
        } else if constexpr (std::is_integral_v<T>) {
          if (!v.is_number_integer()) return "expected a whole number, got " + type_name(v) + " " + v.dump();
          if (auto why = checked(as_text(v)); !why.empty()) return why;
          if (v.is_number_unsigned()) *f = static_cast<T>(v.get<std::uint64_t>());
          else *f = static_cast<T>(v.get<std::int64_t>());
        } else {  // a list: a JSON array (or the flag's comma-separated text)
          using E = typename T::value_type;
          std::vector<config_document> items;
          if (v.is_array()) {
            items.assign(v.begin(), v.end());
          } else if (v.is_string()) {
            std::stringstream s(v.get<std::string>());
            for (std::string part; std::getline(s, part, ',');) {
              if constexpr (std::is_same_v<E, std::string>) {
                items.emplace_back(part);
              } else {
                if (auto why = whole_number_check(0)(part); !why.empty()) return why;
                items.emplace_back(std::stoull(part));
              }
            }
          } else {
            return "expected a list, got " + type_name(v) + " " + v.dump();
          }
          T values;
          for (const config_document& item : items) {
            if constexpr (std::is_same_v<E, std::string>) {
              if (!item.is_string()) return "expected a list of strings, got " + item.dump();
              values.push_back(item.get<std::string>());
            } else {
              if (!item.is_number_integer()) return "expected a list of whole numbers, got " + item.dump();
              if (auto why = checked(as_text(item)); !why.empty()) return why;
              values.push_back(static_cast<E>(item.get<std::int64_t>()));
            }
          }
          *f = std::move(values);
        }
        return "";
      },
      field);
}

config_document field_json(config_field field) {
  return std::visit([](auto* f) { return config_document(*f); }, field);
}

}  // namespace

void apply_config_json(run_config& c, const config_document& json, const std::string& source, const std::string& text,
                       bool record_given) {
  const auto where = [&](const std::string& name) {
    std::string w = source;
    if (const std::size_t line = line_of_key(text, name); line > 0) w += ":" + std::to_string(line);
    return w.empty() ? std::string() : w + ": ";
  };
  if (!json.is_object())
    throw std::invalid_argument((source.empty() ? "" : source + ": ") + "a run configuration is a JSON object of keys, got " +
                                json.type_name());
  run_config updated = c;  // unchanged on a refusal
  std::map<std::string, std::pair<config_key, config_field>> keys;
  for_each_config_key(updated, [&](const config_key& k, config_field f) { keys.emplace(k.name, std::make_pair(k, f)); });
  for (auto it = json.begin(); it != json.end(); ++it) {
    const auto found = keys.find(it.key());
    if (found == keys.end()) {
      std::string hint;  // the flag's spelling with dashes, written with underscores
      std::string dashed = it.key();
      std::replace(dashed.begin(), dashed.end(), '_', '-');
      if (dashed != it.key() && keys.count(dashed)) hint = " (did you mean '" + dashed + "'?)";
      throw std::invalid_argument(where(it.key()) + "unknown key '" + it.key() + "'" + hint +
                                  ": the keys are the flags of `actorpipe train --help` without their dashes");
    }
    const std::string why = set_field(found->second.second, it.value(), found->second.first.check);
    if (!why.empty())  // from a file, its place and the key; from C++, the key in the flag's words
      throw std::invalid_argument(source.empty() ? "--" + it.key() + ": " + why
                                                 : where(it.key()) + "key '" + it.key() + "': " + why);
    if (record_given &&
        std::find(updated.given_keys.begin(), updated.given_keys.end(), it.key()) == updated.given_keys.end())
      updated.given_keys.push_back(it.key());
  }
  c = std::move(updated);
}

run_config read_run_config(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::invalid_argument("--config " + path + ": cannot open the file");
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string text = buffer.str();
  config_document json;
  try {
    json = config_document::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    const std::size_t at = std::min<std::size_t>(e.byte == 0 ? 0 : e.byte - 1, text.size());
    const auto line = 1 + std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(at), '\n');
    throw std::invalid_argument(path + ":" + std::to_string(line) + ": not valid JSON (byte " + std::to_string(e.byte) +
                                "): " + e.what());
  }
  run_config c;
  apply_config_json(c, json, path, text);
  return c;
}

config_document config_json(const run_config& c) {
  config_document out = config_document::object();
  run_config copy = c;
  for_each_config_key(copy, [&](const config_key& k, config_field f) { out[k.name] = field_json(f); });
  return out;
}

}  // namespace ap

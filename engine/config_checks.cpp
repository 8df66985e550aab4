// The run configuration's checks, before any work: values, keys that need each other, files.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <functional>
#include <optional>
#include <stdexcept>

#include "checkpoint/gpt2_weights.hpp"
#include "collective/network_group.hpp"
#include "engine/run_config.hpp"
#include "engine/value_checks.hpp"
#include "model/gpt_spec.hpp"
#include "model/lr_schedule.hpp"
#include "model/sequence_parallel.hpp"
#include "plan/memory_model.hpp"
#include "plan/mesh.hpp"
#include "schedule/schedule_file.hpp"

namespace ap {
namespace {

// Refuses a --resume checkpoint of another model, and --checkpoint-every without --checkpoint.
void check_checkpoint_options(const run_config& o, const sequential* model) {
  if (o.train.checkpoint_every && o.checkpoint_file.empty())
    throw std::invalid_argument("--checkpoint-every needs --checkpoint PATH");
  if (o.resume_file.empty()) return;
  const checkpoint_info saved = read_checkpoint_info(o.resume_file);
  const auto mine = model ? model->layer_specs()
                          : sequential::from_spec(o.model, sequential_options{o.activation, o.init_seed}).layer_specs();
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

// --init-from and --export-as need a GPT-2-shaped gpt (Note [GPT-2 weight files]).
void check_gpt2_weights_options(const run_config& o, const sequential* model) {
  const auto config_of = [&](const std::string& flag) {
    if (!o.language_model())
      throw std::invalid_argument(flag + " needs a gpt model of GPT-2's architecture (--model gpt2, gpt2-tiny, "
                                         "gpt:...), not '" + o.model + "'");
    const gpt_config c = parse_gpt_spec(o.model);
    if (model && model->layer_specs() != gpt_layer_specs(c))
      throw std::invalid_argument(flag + ": the model given in C++ is not the one --model " + o.model + " builds");
    return c;
  };
  if (!o.init_from_file.empty()) {
    const std::string flag = "--init-from " + o.init_from_file;
    if (!o.resume_file.empty())
      throw std::invalid_argument(flag + " with --resume: both set the weights (a resumed run takes its checkpoint's): "
                                         "give one");
    const gpt_config c = config_of(flag);
    check_gpt2_architecture(c, gpt2_format::huggingface, flag);
    gpt2_file_info info;
    try {
      info = read_gpt2_info(o.init_from_file);
    } catch (const std::runtime_error& e) {
      throw std::invalid_argument("--init-from: " + std::string(e.what()));
    }
    if (const std::string differs = gpt2_shape_mismatch(info.config, c, info.heads_stated()); !differs.empty())
      throw std::invalid_argument(flag + ": the file holds " + gpt_spec_text(info.config) + ", another shape than --model " +
                                  o.model + ": " + differs + " (the file's vs --model's)");
  }
  if (!o.export_as_file.empty()) {
    const std::string flag = "--export-as " + o.export_as_file;
    gpt2_format format = gpt2_format::llmc;
    try {
      format = gpt2_format_for_path(o.export_as_file);
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument("--export-as " + std::string(e.what()));
    }
    const gpt_config c = config_of(flag);
    check_gpt2_architecture(c, format, flag);
    if (format == gpt2_format::llmc && !has_tied_head(c))
      throw std::invalid_argument(flag + ": llm.c's format holds no LM head of its own (its logits are x wte^T), and "
                                         "--model " + o.model + " has an untied head (" + gpt_layer_specs(c).back() +
                                         "): write .safetensors, or train a model with a tied head (tied=1)");
  }
}

// The --schedule-file, read and validated against --stages, --microbatches and --chunks.
std::optional<schedule> checked_schedule_file(const run_config& o) {
  if (o.schedule_file.empty()) return std::nullopt;
  schedule user_schedule = read_schedule_file(o.schedule_file);
  if (const validation v = validate_for_run(user_schedule, o.stages, o.pipe.microbatches, o.pipe.chunks_per_stage);
      !v.ok)
    throw std::invalid_argument("--schedule-file " + o.schedule_file + ": " + v.message);
  return user_schedule;
}

// The threads every compute rank computes on (Note [cores per rank]): 0 divides the cores among them.
void check_threads(const run_config& o) {
  if (o.threads < 0) throw std::invalid_argument("--threads must be 0 (automatic) or more, got " + std::to_string(o.threads));
}

// gloo runs over plain TCP: refused beside mutual TLS, before any node is reached.
void check_collectives(const run_config& o, const std::function<void(const std::string&)>& warn) {
  const std::optional<collective_backend> backend = parse_collective_backend(o.collectives);
  if (!backend || !needs_plain_tcp(*backend)) return;
  const std::string flag = "--collectives " + o.collectives;
  if (o.pipe.nodes.empty() && o.rendezvous.empty()) {
    if (warn) warn(flag + ": applies to data-parallel replicas on nodes (--nodes, --rendezvous): unused");
    return;
  }
  if (!o.pipe.security.insecure)
    throw std::invalid_argument(flag + ": gloo runs over plain TCP only (Debian's build has no TLS), "
                                "and the nodes are reached over mutual TLS: add --insecure on a trusted network, or "
                                "keep --collectives ring");
}

// Every key's value against its check, so a value set in C++ is refused in the same words as the flag or key.
void check_values(const run_config& o) {
  run_config scratch;
  apply_config_json(scratch, config_json(o));
}

// The keys of a group given by a file or flags, or set away from their defaults.
std::vector<std::string> changed_keys(const run_config& o, const std::function<bool(const config_key&)>& in_group) {
  const config_document mine = config_json(o), defaults = config_json(run_config{});
  std::vector<std::string> changed;
  run_config copy = o;
  for_each_config_key(copy, [&](const config_key& k, config_field) {
    const bool given = std::find(o.given_keys.begin(), o.given_keys.end(), k.name) != o.given_keys.end();
    if (in_group(k) && (given || mine.at(k.name) != defaults.at(k.name))) changed.push_back(k.name);
  });
  return changed;
}

void refuse_changed(const std::vector<std::string>& keys, const std::string& why) {
  if (!keys.empty()) throw std::invalid_argument("--" + keys.front() + " " + why);
}

}  // namespace

void check_output_path(const std::string& flag, const std::string& path) {
  namespace fs = std::filesystem;
  if (path.empty()) return;
  const std::string where = flag + " " + path + ": ";
  std::error_code ec;
  if (fs::is_directory(path, ec)) throw std::invalid_argument(where + "is a folder; give a file name");
  fs::path folder = fs::path(path).parent_path();
  if (folder.empty()) folder = ".";
  if (!fs::is_directory(folder, ec))
    throw std::invalid_argument(where + "the folder " + folder.string() + " does not exist");
  // access(W_OK) would not see a read-only mount or some ACLs: create a file, as the real write will.
  const std::string probe = (folder / (".actorpipe-probe-" + std::to_string(::getpid()))).string();
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0 && errno != EEXIST)
    throw std::invalid_argument(where + "cannot create a file in the folder " + folder.string() + " (" +
                                std::strerror(errno) + ")");
  if (fd >= 0) {
    ::close(fd);
    ::unlink(probe.c_str());
  }
}

std::optional<schedule> check_run_config(const run_config& o, const std::function<void(const std::string&)>& warn,
                                         const sequential* model) {
  check_values(o);
  const auto named = [](std::vector<std::string> names) {
    return [names = std::move(names)](const config_key& k) {
      return std::find(names.begin(), names.end(), k.name) != names.end();
    };
  };
  if (o.auto_config)
    refuse_changed(changed_keys(o, named({"stages", "threads", "data-parallel", "tensor-parallel", "microbatches",
                                          "schedule", "schedule-file", "chunks", "partition", "layers-per-chunk",
                                          "recompute"})),
                   "is chosen by --auto (Note [automatic configuration]): give one or the other");
  else if (o.stages == 0)
    refuse_changed(changed_keys(o, [](const config_key& k) { return k.pipeline_only; }),
                   "needs --stages N (N >= 1): it only applies to a pipeline");
  // A resolved configuration keeps its trials beside auto false: only a flag counts.
  if (!o.auto_config &&
      std::find(o.given_keys.begin(), o.given_keys.end(), "auto-trials") != o.given_keys.end())
    throw std::invalid_argument("--auto-trials requires --auto");
  if (!o.language_model() && !model) {
    refuse_changed(changed_keys(o, named({"text", "eval-every", "validation-windows"})),
                   "needs a gpt model (--model gpt:...): it only applies to a language model");
  } else if (!model) {
    parse_gpt_spec(o.model);
  }
  if (o.pipe.nodes.empty() && o.rendezvous.empty()) {
    refuse_changed(changed_keys(o, named({"tls-ca", "tls-cert", "tls-key", "insecure"})),
                   "requires --nodes or --rendezvous env: it secures the connections to nodes");
    refuse_changed(changed_keys(o, named({"restart-on-failure", "restart-wait-ms", "snapshot-every", "elastic"})),
                   "requires --nodes or --rendezvous env: it recovers from a lost node");
  }
  if (o.rendezvous.empty())
    refuse_changed(changed_keys(o, named({"rendezvous-timeout"})),
                   "requires --rendezvous env: it is the wait of the job's ranks for each other");
  if (o.elastic > 0) {  // Note [elastic runs]
    if (o.checkpoint_file.empty())
      throw std::invalid_argument("--elastic continues from the run's last checkpoint: give --checkpoint PATH (and "
                                  "--checkpoint-every N: how many steps a lost node can cost)");
    if (!o.schedule_file.empty())
      throw std::invalid_argument("--elastic changes the stage count, which --schedule-file fixes: give one or the other");
    if (!o.pipe.layers_per_chunk.empty())
      throw std::invalid_argument("--elastic changes the stage count, which --layers-per-chunk fixes: let --partition "
                                  "split the layers");
    if (!o.pipe.nodes.empty() && o.pipe.nodes.size() < static_cast<std::size_t>(o.elastic))
      throw std::invalid_argument("--elastic " + std::to_string(o.elastic) + " is more than the " +
                                  std::to_string(o.pipe.nodes.size()) + " nodes of --nodes");
  }
  check_output_path("--checkpoint", o.checkpoint_file);
  check_output_path("--trace", o.trace_file);
  check_output_path("--export", o.export_file);
  check_output_path("--plot", o.plot_file);
  check_output_path("--timeline", o.timeline_file);
  check_output_path("--log", o.log_file);
  check_output_path("--export-as", o.export_as_file);
  check_gpt2_weights_options(o, model);  // before --resume's file is read
  check_checkpoint_options(o, model);
  std::optional<schedule> user_schedule = checked_schedule_file(o);
  if (!o.pipe.nodes.empty()) {
    check_transport_security(o.pipe.security, "train --nodes");
    if (o.pipe.security.insecure && warn) warn(insecure_warning("train --nodes"));
  }
  check_collectives(o, warn);
  if (o.stages > 0) check_mesh(mesh_shape{o.mesh.data_parallel, o.stages, o.mesh.tensor_parallel});
  if (o.mesh.sequence_parallel && o.mesh.tensor_parallel < 2)
    check_sequence_parallel({}, o.mesh.tensor_parallel);
  check_threads(o);
  if (!o.max_memory.empty()) parse_memory_size(o.max_memory);  // Note [memory budget]
  // Note [lr schedule's length]
  optimizer_config lr = o.optimizer;
  const bool decays = lr.schedule.kind == "cosine" || lr.schedule.kind == "linear";
  if (decays && lr.schedule.decay_steps == 0) lr.schedule.decay_steps = o.train.max_steps;
  if (!decays || lr.schedule.decay_steps > 0) check_lr_schedule(lr, o.train.max_steps);
  return user_schedule;
}

}  // namespace ap

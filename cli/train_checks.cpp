// `actorpipe train`'s checks of its flags, run before any data is loaded.
#include <iostream>
#include <optional>
#include <stdexcept>

#include "cli/checks.hpp"
#include "cli/schedule_file.hpp"
#include "cli/train_run.hpp"
#include "cli/transport_flags.hpp"
#include "collective/network_group.hpp"
#include "plan/memory_model.hpp"
#include "plan/mesh.hpp"

namespace ap::cli {
namespace {

// Refuses a --resume checkpoint of another model than --model and --activation build, and
// --checkpoint-every without --checkpoint.
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

// The --schedule-file, read and validated against --stages, --microbatches and --chunks.
std::optional<schedule> checked_schedule_file(const train_options& o) {
  if (o.schedule_file.empty()) return std::nullopt;
  schedule user_schedule = read_schedule_file(o.schedule_file);
  if (const validation v = validate_for_run(user_schedule, o.stages, o.pipe.microbatches, o.pipe.chunks_per_stage);
      !v.ok)
    throw std::invalid_argument("--schedule-file " + o.schedule_file + ": " + v.message);
  return user_schedule;
}

// The threads every compute rank computes on (Note [cores per rank]): 0 divides the cores among them.
void check_threads(const train_options& o) {
  if (o.threads < 0) throw std::invalid_argument("--threads must be 0 (automatic) or more, got " + std::to_string(o.threads));
}

// --collectives gloo and by-size run gloo, over plain TCP: refused beside mutual TLS (the default), named here
// before any node is reached; they are only used by data-parallel replicas on nodes, and said to be unused elsewhere.
void check_collectives(const train_options& o) {
  const std::optional<collective_backend> backend = parse_collective_backend(o.collectives);  // "auto": nothing
  if (!backend || !needs_plain_tcp(*backend)) return;
  const std::string flag = "--collectives " + o.collectives;
  if (o.pipe.nodes.empty() && o.rendezvous.empty()) {
    std::cerr << flag << ": applies to data-parallel replicas on nodes (--nodes, --rendezvous): unused\n";
    return;
  }
  if (!o.pipe.security.insecure)
    throw std::invalid_argument(flag + ": gloo runs over plain TCP only (Debian's build has no TLS), "
                                "and the nodes are reached over mutual TLS: add --insecure on a trusted network, or "
                                "keep --collectives ring");
}

}  // namespace

std::optional<schedule> check_train_flags(const train_options& o) {
  check_output_path("--checkpoint", o.checkpoint_file);
  check_output_path("--trace", o.trace_file);
  check_output_path("--export", o.export_file);
  check_output_path("--plot", o.plot_file);
  check_output_path("--timeline", o.timeline_file);
  check_checkpoint_options(o);
  std::optional<schedule> user_schedule = checked_schedule_file(o);
  if (!o.pipe.nodes.empty()) {
    check_transport_security(o.pipe.security, "train --nodes");
    if (o.pipe.security.insecure) std::cerr << insecure_warning("train --nodes") << "\n";
  }
  check_collectives(o);
  if (o.stages > 0) check_mesh(mesh_shape{o.mesh.data_parallel, o.stages, o.mesh.tensor_parallel});
  check_threads(o);
  if (!o.max_memory.empty()) parse_memory_size(o.max_memory);  // Note [memory budget]; names the text
  return user_schedule;
}

}  // namespace ap::cli

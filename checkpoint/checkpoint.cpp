#include "checkpoint/checkpoint.hpp"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>

#include "checkpoint/named_tensors.hpp"
#include "checkpoint/safetensors.hpp"
#include "failure/crc32c.hpp"
#include "model/spec_text.hpp"
#include "model/weight_tie.hpp"

namespace ap {

namespace {

const std::string optimizer_prefix = checkpoint_optimizer_prefix;

[[noreturn]] void refuse(const std::string& path, const std::string& what) {
  throw std::runtime_error("checkpoint " + path + ": " + what);
}

std::string join(const std::vector<std::string>& parts, const std::string& separator) {
  std::string text;
  for (std::size_t i = 0; i < parts.size(); ++i) text += (i ? separator : "") + parts[i];
  return text;
}

// "linear:4:8;relu;linear:8:3"; an empty model is the empty text.
std::vector<std::string> split_specs(const std::string& text) {
  return text.empty() ? std::vector<std::string>{} : split_fields(text, ';');
}

std::string describe_specs(const std::vector<std::string>& specs) {
  return "[" + join(specs, ";") + "] (" + std::to_string(specs.size()) + " layers)";
}

bool is_optimizer_tensor(const std::string& name) { return name.rfind(optimizer_prefix, 0) == 0; }

// Whether optimizer state `key` ("5.weight.m") is a tied copy's.
bool tied_copy_key(const std::string& key, const std::vector<weight_tie>& ties) {
  for (const weight_tie& t : ties)
    if (key.rfind(t.copy + ".", 0) == 0) return true;
  return false;
}

// The global layer index of a tensor: "3.weight" and "optimizer/3.weight.m" -> 3.
std::optional<std::size_t> layer_index(const std::string& name) {
  const std::size_t start = is_optimizer_tensor(name) ? optimizer_prefix.size() : 0;
  const std::size_t dot = name.find('.', start);
  if (dot == std::string::npos || dot == start) return std::nullopt;
  std::size_t index = 0;
  const auto [end, error] = std::from_chars(name.data() + start, name.data() + dot, index);
  if (error != std::errc() || end != name.data() + dot) return std::nullopt;
  return index;
}

const std::string& metadata_text(const std::string& path, const std::map<std::string, std::string>& metadata,
                                 const std::string& key) {
  const auto it = metadata.find(key);
  if (it == metadata.end()) refuse(path, "metadata has no \"" + key + "\"");
  return it->second;
}

std::uint64_t metadata_number(const std::string& path, const std::map<std::string, std::string>& metadata,
                              const std::string& key) {
  const std::string& text = metadata_text(path, metadata, key);
  std::uint64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || error != std::errc() || end != text.data() + text.size())
    refuse(path, "metadata \"" + key + "\" is '" + text + "', not a non-negative integer");
  return value;
}

std::string hex8(std::uint32_t value) {
  char text[9];
  std::snprintf(text, sizeof text, "%08x", value);
  return text;
}

std::string tensor_checksum_key(const std::string& name) { return checkpoint_tensor_checksum_prefix + name; }

// The CRC32C of every other metadata entry, in key order: "key=value\n" each.
std::uint32_t metadata_checksum(const std::map<std::string, std::string>& metadata) {
  std::uint32_t crc = 0;
  for (const auto& [key, value] : metadata) {
    if (key == checkpoint_metadata_checksum_key) continue;
    const std::string entry = key + "=" + value + "\n";
    crc = crc32c(entry.data(), entry.size(), crc);
  }
  return crc;
}

bool has_checksums(const std::map<std::string, std::string>& metadata) {
  return metadata.count(checkpoint_metadata_checksum_key) > 0;
}

void check_metadata_checksum(const std::string& path, const std::map<std::string, std::string>& metadata) {
  if (!has_checksums(metadata)) return;  // written before checksums: read unchecked
  const std::string& stored = metadata.at(checkpoint_metadata_checksum_key);
  const std::string computed = hex8(metadata_checksum(metadata));
  if (stored != computed)
    refuse(path, "its header's metadata fails its checksum (CRC32C " + computed + ", stored " + stored +
                     "): the file is corrupted (Note [checkpoint checksums])");
}

void check_tensor_checksum(const std::string& path, const std::map<std::string, std::string>& metadata,
                           const std::string& name, const tensor& value) {
  if (!has_checksums(metadata)) return;
  const auto stored = metadata.find(tensor_checksum_key(name));
  if (stored == metadata.end())
    refuse(path, "tensor " + name + " has no checksum (no metadata \"" + tensor_checksum_key(name) +
                     "\") in a checkpoint whose tensors have them: the file is corrupted or was edited");
  const std::string computed = hex8(crc32c(value.bytes(), value.byte_size()));
  if (stored->second != computed)
    refuse(path, "tensor " + name + " fails its checksum (CRC32C " + computed + ", stored " + stored->second +
                     "): the file is corrupted (Note [checkpoint checksums])");
}

checkpoint_info parse_info(const std::string& path, const std::map<std::string, std::string>& metadata) {
  const auto format = metadata.find("format");
  if (format == metadata.end())
    refuse(path, std::string("not an actorpipe checkpoint: its metadata has no \"format\" (expected '") +
                     checkpoint_format + "')");
  if (format->second != checkpoint_format)
    refuse(path, "format '" + format->second + "' is not '" + checkpoint_format + "'");
  checkpoint_info info;
  info.layer_specs = split_specs(metadata_text(path, metadata, "model"));
  info.state.step = metadata_number(path, metadata, "step");
  info.state.epoch = metadata_number(path, metadata, "epoch");
  info.state.batch_in_epoch = metadata_number(path, metadata, "batch_in_epoch");
  info.state.data_seed = metadata_number(path, metadata, "data_seed");
  info.state.model_spec = metadata_text(path, metadata, "model_spec");
  info.optimizer_steps = long(metadata_number(path, metadata, "optimizer_steps"));
  const std::string& optimizer_state = metadata_text(path, metadata, "optimizer_state");
  if (optimizer_state != "included" && optimizer_state != "none")
    refuse(path, "metadata \"optimizer_state\" is '" + optimizer_state + "', not 'included' or 'none'");
  info.has_optimizer_state = optimizer_state == "included";
  check_metadata_checksum(path, metadata);  // after the format check, so another kind of file is named as such
  info.checksums = has_checksums(metadata);
  return info;
}

void check_layers(const std::string& path, const std::vector<std::string>& saved, const sequential& model,
                  bool whole) {
  const std::vector<std::string> mine = model.layer_specs();
  if (whole) {
    if (saved != mine)
      refuse(path, "holds a different model: its layers are " + describe_specs(saved) + ", this model's are " +
                       describe_specs(mine));
    return;
  }
  const std::size_t first = model.first_index(), last = first + model.size();
  const std::string slice = "this slice (layers " + std::to_string(first) + ".." + std::to_string(last) + ") " +
                            describe_specs(mine);
  if (last > saved.size())
    refuse(path, "holds a model of " + std::to_string(saved.size()) + " layers " + describe_specs(saved) +
                     ", too few for " + slice);
  for (std::size_t i = 0; i < mine.size(); ++i)
    if (saved[first + i] != mine[i])
      refuse(path, "holds a different model: layer " + std::to_string(first + i) + " is " + saved[first + i] +
                       " there but " + mine[i] + " here; its layers are " + describe_specs(saved) + ", " + slice);
}

training_state load(const std::string& path, sequential& model, optimizer* opt, bool whole) {
  if (whole && model.first_index() != 0)
    throw std::invalid_argument("load_checkpoint " + path + ": the model is a slice starting at layer " +
                                std::to_string(model.first_index()) + ": use load_checkpoint_slice");
  // One read, so everything below sees one version of the file even if a saver renames a new one over it; only
  // our layers' tensors are read.
  const std::size_t first = model.first_index(), last = first + model.size();
  const std::vector<weight_tie> ties = weight_ties(model);
  const auto owner_of_copy_here = [&](const std::string& name) {
    const std::string key = is_optimizer_tensor(name) ? name.substr(optimizer_prefix.size()) : name;
    for (const weight_tie& t : ties)
      if (key == t.owner || key.rfind(t.owner + ".", 0) == 0) return true;
    return false;
  };
  std::set<std::string> names;
  const safetensors_file file = read_safetensors(path, [&](const std::string& name) {
    names.insert(name);
    const auto index = layer_index(name);
    return index && ((*index >= first && *index < last) || owner_of_copy_here(name)) && (opt || !is_optimizer_tensor(name));
  });
  const checkpoint_info info = parse_info(path, file.metadata);
  check_layers(path, info.layer_specs, model, whole);
  if (opt && !info.has_optimizer_state)
    refuse(path, "was saved without optimizer state: load it with no optimizer to restore the weights only");

  // Every tensor must name a layer of the saved model; those of our layers must be our parameters (or their
  // optimizer state).
  std::map<std::string, parameter> params;
  for (const parameter& p : model.parameters()) params.emplace(p.name, p);
  const auto owner = [&](const std::string& key) -> const parameter* {
    for (const auto& [name, p] : params)
      if (key.rfind(name + ".", 0) == 0) return &p;
    return nullptr;
  };
  // A tied copy's weight and optimizer state are its owner's, transposed, where the file
  // stores them once (Note [tied weights]).
  std::map<std::string, tensor> rebuilt;
  for (const weight_tie& t : ties)
    for (const auto& [name, value] : file.tensors) {
      const bool state = is_optimizer_tensor(name);
      const std::string key = state ? name.substr(optimizer_prefix.size()) : name;
      if (key != t.owner && key.rfind(t.owner + ".", 0) != 0) continue;
      const std::string copy = (state ? optimizer_prefix : std::string()) + t.copy + key.substr(t.owner.size());
      if (names.count(copy)) continue;  // stored twice, as before ties were stored once
      tensor transposed = value.dimension() == 2 ? zeros({value.shape()[1], value.shape()[0]}) : zeros(shape_of(value));
      add_tied(transposed, value);
      rebuilt.emplace(copy, std::move(transposed));
    }
  for (const auto& [name, value] : rebuilt) names.insert(name);
  std::set<std::string> optimizer_keys;
  for (const std::string& name : names) {
    const auto index = layer_index(name);
    if (!index || *index >= info.layer_specs.size())
      refuse(path, "unexpected tensor " + name + ": it belongs to no layer of the saved model " +
                       describe_specs(info.layer_specs));
    if (*index < first || *index >= last) continue;
    const std::string layer = "layer " + std::to_string(*index) + " (" + info.layer_specs[*index] + ")";
    if (!is_optimizer_tensor(name)) {
      if (!params.count(name)) refuse(path, "unexpected tensor " + name + ": " + layer + " has no such parameter");
      continue;
    }
    const std::string key = name.substr(optimizer_prefix.size());
    if (!owner(key)) refuse(path, "unexpected tensor " + name + ": state of no parameter of " + layer);
    optimizer_keys.insert(key);
  }

  std::map<std::string, tensor*> state;
  if (opt) {
    // Note [fresh optimizer state].
    if (info.optimizer_steps > 0) {
      std::vector<parameter> list;
      for (const auto& [name, p] : params) list.push_back(p);
      opt->init_state(list);
    }
    state = opt->state();
    for (const std::string& key : optimizer_keys)
      if (!state.count(key)) {
        std::vector<std::string> keys;
        for (const auto& [k, t] : state) keys.push_back(k);
        refuse(path, "unexpected tensor " + optimizer_prefix + key + ": this optimizer has no such state (it has " +
                         (keys.empty() ? std::string("none") : join(keys, ", ")) +
                         "): was the checkpoint saved with another optimizer?");
      }
    for (const auto& [key, t] : state)
      if (!optimizer_keys.count(key))
        refuse(path, "missing tensor " + optimizer_prefix + key +
                         " (this optimizer has that state: was the checkpoint saved with another optimizer?)");
  }

  // Every parameter and state tensor present with its shape, checked before anything changes (Note [binding
  // named tensors]).
  std::vector<tensor_target> targets = parameter_targets(model.parameters(), "the model's parameter");
  for (auto& t : optimizer_state_targets(state, optimizer_prefix, "the optimizer's state")) targets.push_back(std::move(t));
  // Every tensor's checksum is checked before any is copied (Note [checkpoint checksums]).
  std::map<std::string, const tensor*> target_of;
  for (const tensor_target& t : targets) target_of.emplace(t.name, t.value);
  for (const auto& [name, value] : file.tensors) {
    const auto target = target_of.find(name);
    if (target != target_of.end() &&
        (target->second->type() != value.type() || target->second->shape() != value.shape()))
      continue;
    check_tensor_checksum(path, file.metadata, name, value);
  }
  tensor_sources sources;
  for (const auto& [name, t] : file.tensors) {
    const auto index = layer_index(name);
    if (*index >= first && *index < last) sources.emplace(name, tensor_source{&t, {}});
  }
  for (const auto& [name, t] : rebuilt) sources.emplace(name, tensor_source{&t, {}});
  if (const std::string why = bind_named_tensors(targets, sources, "no parameter or optimizer state here"); !why.empty())
    refuse(path, why);
  if (opt) opt->set_steps(info.optimizer_steps);
  return info.state;
}

}  // namespace

void save_checkpoint(const std::string& path, sequential& model, optimizer* opt, const training_state& state) {
  if (model.first_index() != 0)
    throw std::invalid_argument("save_checkpoint " + path + ": the model is a slice starting at layer " +
                                std::to_string(model.first_index()) + "; a checkpoint holds the whole model");
  const std::vector<std::string> specs = model.layer_specs();
  for (const std::string& s : specs)
    if (s.find(';') != std::string::npos)
      throw std::invalid_argument("save_checkpoint " + path + ": layer spec '" + s + "' contains ';'");

  const std::vector<parameter> params = model.parameters();
  const std::vector<weight_tie> ties = weight_ties(model);  // a tied copy is stored once (Note [tied weights])
  tensor_refs tensors;
  for (const parameter& p : params)
    if (!is_tied_copy(p.name, ties)) tensors.emplace_back(p.name, p.value);
  if (opt)
    for (const auto& [key, t] : opt->state())
      if (!tied_copy_key(key, ties)) tensors.emplace_back(optimizer_prefix + key, t);

  std::map<std::string, std::string> metadata = {
      {"format", checkpoint_format},
      {"model", join(specs, ";")},
      {"optimizer_steps", std::to_string(opt ? opt->steps() : 0)},
      {"optimizer_state", opt ? "included" : "none"},
      {"step", std::to_string(state.step)},
      {"epoch", std::to_string(state.epoch)},
      {"batch_in_epoch", std::to_string(state.batch_in_epoch)},
      {"data_seed", std::to_string(state.data_seed)},
      {"model_spec", state.model_spec},
  };
  // Each tensor's bytes as they lie in memory (little-endian), then the metadata (Note [checkpoint checksums]).
  for (const auto& [name, t] : tensors) metadata[tensor_checksum_key(name)] = hex8(crc32c(t->bytes(), t->byte_size()));
  metadata[checkpoint_metadata_checksum_key] = hex8(metadata_checksum(metadata));
  write_safetensors(path, tensors, metadata);
}

void export_weights(const std::string& path, sequential& model, dtype type) {
  std::vector<tensor> converted;
  const std::vector<parameter> params = model.parameters();
  converted.reserve(params.size());
  tensor_refs tensors;
  for (const parameter& p : params) {
    converted.push_back(p.value->astype(type));
    tensors.emplace_back(p.name, &converted.back());
  }
  write_safetensors(path, tensors,
                    {{"format", exported_weights_format}, {"model", join(model.layer_specs(), ";")},
                     {"dtype", dtype_name(type)}});
}

training_state load_checkpoint(const std::string& path, sequential& model, optimizer* opt) {
  return load(path, model, opt, true);
}

training_state load_checkpoint_slice(const std::string& path, sequential& slice, optimizer* opt) {
  return load(path, slice, opt, false);
}

checkpoint_info read_checkpoint_info(const std::string& path) {
  const safetensors_file header = read_safetensors(path, [](const std::string&) { return false; });
  return parse_info(path, header.metadata);
}

void materialize_optimizer_state(optimizer& opt, const std::vector<parameter>& params) {
  opt.init_state(params);
  for (const auto& [key, t] : opt.state()) std::fill(t->begin(), t->end(), 0.0f);
}

}  // namespace ap

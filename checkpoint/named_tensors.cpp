#include "checkpoint/named_tensors.hpp"

namespace ap {

void add_parameters(named_tensors& out, const std::vector<parameter>& params) {
  for (const parameter& p : params) {
    out.names.push_back(p.name);
    out.values.push_back(*p.value);
  }
}

void add_optimizer_state(named_tensors& out, const std::map<std::string, tensor*>& state, const std::string& prefix) {
  for (const auto& [key, t] : state) {
    out.names.push_back(prefix + key);
    out.values.push_back(*t);
  }
}

std::vector<tensor_target> parameter_targets(const std::vector<parameter>& params, const std::string& what) {
  std::vector<tensor_target> targets;
  for (const parameter& p : params) targets.push_back({p.name, p.value, what});
  return targets;
}

std::vector<tensor_target> optimizer_state_targets(const std::map<std::string, tensor*>& state,
                                                   const std::string& prefix, const std::string& what) {
  std::vector<tensor_target> targets;
  for (const auto& [key, t] : state) targets.push_back({prefix + key, t, what});
  return targets;
}

namespace {

std::string origin(const tensor_source& s) { return s.from.empty() ? "" : " from " + s.from; }

}  // namespace

std::string add_sources(tensor_sources& sources, const named_tensors& given, const std::string& from) {
  if (given.names.size() != given.values.size())
    return std::to_string(given.names.size()) + " names for " + std::to_string(given.values.size()) + " tensors" +
           (from.empty() ? "" : " from " + from);
  for (std::size_t i = 0; i < given.names.size(); ++i) {
    const auto [it, added] = sources.emplace(given.names[i], tensor_source{&given.values[i], from});
    if (!added)
      return "tensor " + given.names[i] + " given twice" +
             (from.empty() ? "" : " (by " + it->second.from + " and " + from + ")");
  }
  return {};
}

// Note [binding named tensors]
std::string bind_named_tensors(const std::vector<tensor_target>& targets, const tensor_sources& sources,
                               const std::string& unexpected) {
  std::map<std::string, const tensor_target*> by_name;
  for (const tensor_target& t : targets) by_name.emplace(t.name, &t);
  for (const tensor_target& t : targets) {
    const auto it = sources.find(t.name);
    if (it == sources.end()) return "missing tensor " + t.name + " (" + t.what + ")";
    const tensor& given = *it->second.value;
    if (given.type() != t.value->type())  // no silent conversion between dtypes
      return "tensor " + t.name + origin(it->second) + " is " + describe(given) + ", " + t.what + " is " +
             describe(*t.value);
    if (given.shape() != t.value->shape())
      return "tensor " + t.name + origin(it->second) + " has shape " + shape_string(given) + " but " + t.what +
             " has shape " + shape_string(*t.value);
  }
  for (const auto& [name, source] : sources)
    if (!by_name.count(name)) return "unexpected tensor " + name + origin(source) + ": " + unexpected;
  for (const tensor_target& t : targets) *t.value = *sources.at(t.name).value;
  return {};
}

}  // namespace ap

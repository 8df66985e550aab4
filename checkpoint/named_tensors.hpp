// Tensors under their global names (Note [checkpoint layout]), as parameters and optimizer state travel
// between stages and into checkpoints, and their binding to a model's or optimizer's tensors.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "model/layer.hpp"
#include "tensor/tensor.hpp"

namespace ap {

// names[i] names values[i] (the wire form, actors/messages.hpp).
struct named_tensors {
  std::vector<std::string> names;
  std::vector<tensor> values;
};

void add_parameters(named_tensors& out, const std::vector<parameter>& params);
// Appends copies of an optimizer's state under prefix + key ("optimizer/3.weight.m").
void add_optimizer_state(named_tensors& out, const std::map<std::string, tensor*>& state, const std::string& prefix);

// A tensor to fill, under its name, and what it is for errors ("the model's parameter").
struct tensor_target {
  std::string name;
  tensor* value = nullptr;
  std::string what;
};
std::vector<tensor_target> parameter_targets(const std::vector<parameter>& params, const std::string& what);
std::vector<tensor_target> optimizer_state_targets(const std::map<std::string, tensor*>& state,
                                                   const std::string& prefix, const std::string& what);

// A tensor offered under a name, and its origin for errors ("stage 2"; may be empty).
struct tensor_source {
  const tensor* value = nullptr;
  std::string from;
};
using tensor_sources = std::map<std::string, tensor_source>;

// Offers every tensor of `given`. Returns a refusal text (a name given twice, names and tensors that do not
// pair up) or empty. The sources point into `given`.
std::string add_sources(tensor_sources& sources, const named_tensors& given, const std::string& from = "");

// Note [binding named tensors]: fills every target with the source of its name. Every target must be offered
// with its dtype and shape, and every source must be some target's (else "unexpected tensor NAME: " +
// `unexpected`). Everything is checked before anything is copied, so a refusal changes nothing. Returns the
// refusal's text, or empty. Checkpoints, stage states, stage specs and gathered pipelines all bind here.
[[nodiscard]] std::string bind_named_tensors(const std::vector<tensor_target>& targets, const tensor_sources& sources,
                                             const std::string& unexpected);

}  // namespace ap

#include "stage/stage_state.hpp"

#include <algorithm>

#include "checkpoint/checkpoint.hpp"

namespace ap {

std::string gather_stage_states(const std::vector<stage_state>& states, sequential& model, optimizer& opt,
                                const std::string& optimizer_kind) {
  tensor_sources sent;
  for (const stage_state& st : states) {
    if (st.optimizer_steps != states.front().optimizer_steps)
      return "stage " + std::to_string(st.stage) + "'s optimizer took " + std::to_string(st.optimizer_steps) +
             " steps, stage " + std::to_string(states.front().stage) + "'s " +
             std::to_string(states.front().optimizer_steps);
    if (std::string why = add_sources(sent, st.tensors, "stage " + std::to_string(st.stage)); !why.empty()) return why;
  }
  const std::string prefix = checkpoint_optimizer_prefix;
  const bool has_state =
      std::any_of(sent.begin(), sent.end(), [&](const auto& named) { return named.first.rfind(prefix, 0) == 0; });
  if (has_state) opt.init_state(model.parameters());
  opt.set_steps(states.empty() ? 0 : static_cast<long>(states.front().optimizer_steps));
  std::vector<tensor_target> targets = parameter_targets(model.parameters(), "the model's parameter");
  for (auto& t : optimizer_state_targets(opt.state(), prefix, "the optimizer's state")) targets.push_back(std::move(t));
  return bind_named_tensors(targets, sent, "neither a parameter of the model nor state of a " + optimizer_kind + " optimizer");
}

}  // namespace ap

// A stage's whole state for a checkpoint (Note [stage state]).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "checkpoint/named_tensors.hpp"
#include "model/optimizer.hpp"
#include "model/sequential.hpp"

namespace ap {

// Parameters, optimizer state and steps under global names (state_atom answers one, load_atom loads one).
struct stage_state {
  int stage = 0;
  std::int64_t optimizer_steps = 0;
  named_tensors tensors;
};

// Binds every stage's state (of one pipeline or replica) onto the whole `model` and a fresh `opt` of the stages'
// kind, so the checkpoint library saves them like a single process's (Note [stage state]). Returns "" or why not
// (steps differ between stages, a tensor missing, doubled or unknown).
std::string gather_stage_states(const std::vector<stage_state>& states, sequential& model, optimizer& opt,
                                const std::string& optimizer_kind);

}  // namespace ap

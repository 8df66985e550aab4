// A stage's whole state for a checkpoint: Note [stage state] in stage/stage_rank.hpp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "checkpoint/named_tensors.hpp"
#include "model/optimizer.hpp"
#include "model/sequential.hpp"

namespace ap {

// Its parameters under their global names ("3.weight"), its optimizer's state ("optimizer/3.weight.m") and
// the optimizer's steps. The processor answers state_atom with one, and loads one sent as (load_atom, stage_state).
struct stage_state {
  int stage = 0;
  std::int64_t optimizer_steps = 0;
  named_tensors tensors;
};

// The stages' tensors have global names; together they are the whole model and the state of one optimizer for
// all of it (Note [stage state]). Binds `states` (every stage's, of one pipeline or one replica) onto `model`
// (the whole model) and `opt` (a fresh optimizer of the stages' kind: its state is initialised when a stage
// sent any, its steps set), so the checkpoint library saves them like a single process's. Returns "" or why
// not (steps that differ between stages, a tensor missing, doubled or unknown), changing nothing useful then.
std::string gather_stage_states(const std::vector<stage_state>& states, sequential& model, optimizer& opt,
                                const std::string& optimizer_kind);

}  // namespace ap

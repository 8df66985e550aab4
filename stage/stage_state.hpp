// A stage's whole state for a checkpoint: Note [stage state] in stage/stage_worker.hpp.
#pragma once

#include <cstdint>

#include "checkpoint/named_tensors.hpp"

namespace ap {

// Its parameters under their global names ("3.weight"), its optimizer's state ("optimizer/3.weight.m") and
// the optimizer's steps. The processor answers state_atom with one, and loads one sent as (load_atom, stage_state).
struct stage_state {
  int stage = 0;
  std::int64_t optimizer_steps = 0;
  named_tensors tensors;
};

}  // namespace ap

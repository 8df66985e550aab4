// Which failed steps --restart-on-failure restarts (Note [recovery] in actors/pipeline.cpp), decided by the
// step's error code alone (Note [errors as codes]): the text may say anything.
#pragma once

#include "actors/messages.hpp"

namespace ap {

// A step that lost a node (killed, or silent past the heartbeat timeout): the pipeline waits for the node or a
// replacement, restores the last snapshot and replays. Any other failure is the caller's to see.
inline bool restart_recovers(const step_result& result) {
  return !result.ok && result.code == error_code::lost_node;
}

}  // namespace ap

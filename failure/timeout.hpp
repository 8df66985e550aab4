// How long anything waits on a peer by default: a receive or barrier of the communicator, a stage waiting for
// its next task, a node's answer, a stage's optimizer step. One constant, so the pipeline, the stages, the
// communicator and the command line agree.
#pragma once

#include <chrono>

namespace ap {

inline constexpr std::chrono::milliseconds default_timeout{30000};

}  // namespace ap

// What an action waits for. The validator and the simulator share these rules, so a schedule that validates is
// one the simulator (and the actor runtime) can finish.
#pragma once

#include <array>
#include <vector>

#include "schedule/schedule.hpp"

namespace ap::detail {

// A milestone of one (microbatch, chunk): its forward ran, its input gradient ran (B or I), or its weight
// gradient ran (B or W).
enum class milestone : std::uint8_t { forward, input_grad, weight_grad };

struct requirement {
  milestone what;
  int microbatch;
  int chunk;
};

// Note [dependencies]: F of chunk c needs F of chunk c-1 of the same microbatch. B or I of chunk c needs its own
// F (the stash) and B/I of chunk c+1 (the last chunk's backward starts from its own forward's loss). W needs its
// own I. R needs the weight gradient of every microbatch of its chunk; nothing waits for R within the step. A
// whole-batch B (Note [sync-backward]) needs all of these for every microbatch.
inline std::vector<requirement> requirements_of(const action& a, int total_chunks, int microbatches) {
  std::vector<requirement> needs;
  if (a.microbatch == all_microbatches) {
    for (int mb = 0; mb < microbatches; ++mb) {
      action one = a;
      one.microbatch = mb;
      for (const auto& r : requirements_of(one, total_chunks, microbatches)) needs.push_back(r);
    }
    return needs;
  }
  switch (a.kind) {
    case op::forward:
      if (a.chunk > 0) needs.push_back({milestone::forward, a.microbatch, a.chunk - 1});
      break;
    case op::backward:
    case op::backward_input:
      needs.push_back({milestone::forward, a.microbatch, a.chunk});
      if (a.chunk + 1 < total_chunks) needs.push_back({milestone::input_grad, a.microbatch, a.chunk + 1});
      break;
    case op::backward_weight:
      needs.push_back({milestone::input_grad, a.microbatch, a.chunk});
      break;
    case op::reduce_grad:
      needs.push_back({milestone::weight_grad, a.microbatch, a.chunk});
      break;
  }
  return needs;
}

// When each milestone was reached (negative: not yet). Indexed by (microbatch, chunk, milestone).
class milestone_times {
 public:
  milestone_times(int microbatches, int total_chunks)
      : chunks_(total_chunks), times_(static_cast<std::size_t>(microbatches) * total_chunks * 3, -1.0) {}
  bool reached(const requirement& r) const { return at(r) >= 0.0; }
  double time(const requirement& r) const { return at(r); }
  // Records that action `a` finished at time `end`.
  void finish(const action& a, double end) {
    if (a.microbatch == all_microbatches) {  // Note [sync-backward]
      const int microbatches = static_cast<int>(times_.size() / (static_cast<std::size_t>(chunks_) * 3));
      for (int mb = 0; mb < microbatches; ++mb) {
        action one = a;
        one.microbatch = mb;
        finish(one, end);
      }
      return;
    }
    switch (a.kind) {
      case op::forward: slot({milestone::forward, a.microbatch, a.chunk}) = end; break;
      case op::backward:
        slot({milestone::input_grad, a.microbatch, a.chunk}) = end;
        slot({milestone::weight_grad, a.microbatch, a.chunk}) = end;
        break;
      case op::backward_input: slot({milestone::input_grad, a.microbatch, a.chunk}) = end; break;
      case op::backward_weight: slot({milestone::weight_grad, a.microbatch, a.chunk}) = end; break;
      case op::reduce_grad: break;
    }
  }

 private:
  std::size_t index(const requirement& r) const {
    return (static_cast<std::size_t>(r.microbatch) * chunks_ + r.chunk) * 3 + static_cast<std::size_t>(r.what);
  }
  double at(const requirement& r) const { return times_[index(r)]; }
  double& slot(const requirement& r) { return times_[index(r)]; }
  int chunks_;
  std::vector<double> times_;
};

}  // namespace ap::detail

// The schedule generators: each builds the per-stage action lists as data.
#include <algorithm>
#include <stdexcept>

#include "schedule/schedule.hpp"

namespace ap {

namespace {

void require_positive(const char* parameter, int value, const std::string& schedule_name) {
  if (value < 1)
    throw std::invalid_argument(schedule_name + ": " + parameter + " must be at least 1 (got " +
                                std::to_string(value) + ")");
}

schedule empty_schedule(const std::string& name, int stages, int microbatches, int chunks_per_stage) {
  require_positive("stages", stages, name);
  require_positive("microbatches", microbatches, name);
  require_positive("chunks_per_stage", chunks_per_stage, name);
  schedule s;
  s.name = name;
  s.stages = stages;
  s.chunks_per_stage = chunks_per_stage;
  s.microbatches = microbatches;
  s.per_stage.resize(static_cast<std::size_t>(stages));
  return s;
}

action make_action(int stage, op kind, int microbatch, int chunk) { return action{stage, kind, microbatch, chunk}; }

// Note [1F1B skeleton]: every generator is one shape: `warmup` forwards, then pairs of one forward and one
// backward, then the remaining backwards. The generators differ in what the k-th forward and backward are
// (add_forward(k), add_backward(k)) and in the warmup.
template <class Forward, class Backward>
void one_forward_one_backward(int total, int warmup, Forward add_forward, Backward add_backward) {
  int next_forward = 0, next_backward = 0;
  while (next_forward < std::min(warmup, total)) add_forward(next_forward++);
  while (next_forward < total) {
    add_forward(next_forward++);
    add_backward(next_backward++);
  }
  while (next_backward < total) add_backward(next_backward++);
}

}  // namespace

// GPipe (PyTorch's ScheduleGPipe): all forwards, then all backwards, in microbatch order.
schedule make_gpipe(int stages, int microbatches) {
  schedule s = empty_schedule("gpipe", stages, microbatches, 1);
  for (int stage = 0; stage < stages; ++stage) {
    auto& list = s.per_stage[stage];
    one_forward_one_backward(
        microbatches, /*warmup=*/microbatches, [&](int mb) { list.push_back(make_action(stage, op::forward, mb, stage)); },
        [&](int mb) { list.push_back(make_action(stage, op::backward, mb, stage)); });
  }
  return s;
}

// 1F1B (PipeDream-Flush): stage s warms up with min(m, p-s-1) forwards; it holds at most min(m, p-s) activations.
schedule make_1f1b(int stages, int microbatches) {
  schedule s = empty_schedule("1f1b", stages, microbatches, 1);
  for (int stage = 0; stage < stages; ++stage) {
    auto& list = s.per_stage[stage];
    one_forward_one_backward(
        microbatches, /*warmup=*/stages - stage - 1,
        [&](int mb) { list.push_back(make_action(stage, op::forward, mb, stage)); },
        [&](int mb) { list.push_back(make_action(stage, op::backward, mb, stage)); });
  }
  return s;
}

// Interleaved 1F1B with v chunks per stage, Megatron-Core's order: stage s runs m*v virtual microbatches.
//
// Note [interleaved order]: virtual microbatches come in groups of p*v: p microbatches of local chunk 0, then the
// same p of local chunk 1, and so on (hence m a multiple of p); the backward walks the chunks in reverse. Warmup
// is (v-1)*p + (p-s-1), capped at m*v, without Megatron-Core's extra p-s-1 (for its blocking sends). With v = 1
// this is exactly 1F1B.
schedule make_interleaved_1f1b(int stages, int microbatches, int chunks_per_stage) {
  schedule s = empty_schedule("interleaved", stages, microbatches, chunks_per_stage);
  const int p = stages, m = microbatches, v = chunks_per_stage;
  if (v > 1 && m % p != 0)
    throw std::invalid_argument("interleaved: microbatches (" + std::to_string(m) +
                                ") must be a multiple of stages (" + std::to_string(p) +
                                ") when chunks_per_stage > 1; Megatron-Core's interleaved order sends "
                                "microbatches through the chunks in groups of 'stages' "
                                "(use gpipe, 1f1b or zb-h1 for fewer microbatches than stages)");
  const int total = m * v;
  const int group = p * v;
  for (int stage = 0; stage < p; ++stage) {
    auto microbatch_of = [&](int k) { return (k / group) * p + k % p; };
    auto forward_chunk = [&](int k) { return ((k % group) / p) * p + stage; };
    auto backward_chunk = [&](int k) { return (v - 1 - (k % group) / p) * p + stage; };
    auto& list = s.per_stage[stage];
    one_forward_one_backward(
        total, /*warmup=*/(v - 1) * p + (p - stage - 1),
        [&](int k) { list.push_back(make_action(stage, op::forward, microbatch_of(k), forward_chunk(k))); },
        [&](int k) { list.push_back(make_action(stage, op::backward, microbatch_of(k), backward_chunk(k))); });
  }
  return s;
}

// ZB-H1 (Qi et al. 2023, "Zero Bubble Pipeline Parallelism"): the backward split into I (on the critical path)
// and W (needed by nobody downstream).
//
// Note [zb-h1 order]: stage s keeps 1F1B's warmup, then steps "F, I"; the first s steps leave their W out, later
// steps end with the oldest waiting W, and the s deferred W's fill 1F1B's cooldown idle (PyTorch's
// _get_1f1b_rank_ops with enable_zero_bubble). With F = I = W and m >= p the bubble is a third of 1F1B's; every
// stage peaks at p activations (Note [stash accounting]).
schedule make_zb_h1(int stages, int microbatches) {
  schedule s = empty_schedule("zb-h1", stages, microbatches, 1);
  for (int stage = 0; stage < stages; ++stage) {
    auto& list = s.per_stage[stage];
    const int deferred = stage;  // W's left out of the first steps (Note [zb-h1 order])
    const auto add_weight = [&](int mb) { list.push_back(make_action(stage, op::backward_weight, mb, stage)); };
    // The k-th backward is I of microbatch k, then the W of the oldest microbatch waiting for one.
    one_forward_one_backward(
        microbatches, /*warmup=*/stages - stage - 1,
        [&](int mb) { list.push_back(make_action(stage, op::forward, mb, stage)); },
        [&](int k) {
          list.push_back(make_action(stage, op::backward_input, k, stage));
          if (k >= deferred) add_weight(k - deferred);
        });
    for (int mb = std::max(0, microbatches - deferred); mb < microbatches; ++mb) add_weight(mb);  // the deferred W's
  }
  return s;
}

// The synchronous backward (Note [sync-backward]): all forwards, then one whole-batch backward per stage.
schedule make_sync_backward(int stages, int microbatches) {
  schedule s = empty_schedule("sync-backward", stages, microbatches, 1);
  for (int stage = 0; stage < stages; ++stage) {
    auto& list = s.per_stage[stage];
    for (int mb = 0; mb < microbatches; ++mb) list.push_back(make_action(stage, op::forward, mb, stage));
    list.push_back(make_action(stage, op::backward, all_microbatches, stage));
  }
  return s;
}

bool whole_batch_backward(const schedule& s) {
  for (const auto& row : s.per_stage)
    for (const action& a : row)
      if (a.kind == op::backward && a.microbatch == all_microbatches) return true;
  return false;
}

bool has_gradient_reductions(const schedule& s) {
  for (const auto& row : s.per_stage)
    for (const action& a : row)
      if (is_reduction(a)) return true;
  return false;
}

schedule with_gradient_reductions(schedule s) {
  for (auto& row : s.per_stage) {
    std::vector<action> out;
    for (const action& a : row)
      if (!is_reduction(a)) out.push_back(a);
    // Backwards to front: the first backward met for a chunk is its last; R goes right after it.
    std::vector<bool> placed(static_cast<std::size_t>(s.total_chunks()), false);
    for (std::size_t i = out.size(); i-- > 0;) {
      const action a = out[i];
      const bool gradient_final = a.kind == op::backward || a.kind == op::backward_weight;
      if (!gradient_final || a.chunk < 0 || a.chunk >= s.total_chunks() || placed[static_cast<std::size_t>(a.chunk)])
        continue;
      placed[static_cast<std::size_t>(a.chunk)] = true;
      out.insert(out.begin() + static_cast<long>(i) + 1, action{a.stage, op::reduce_grad, all_microbatches, a.chunk});
    }
    row = std::move(out);
  }
  return s;
}

std::vector<std::string> schedule_names() { return {"gpipe", "1f1b", "interleaved", "zb-h1", "sync-backward"}; }

schedule make_schedule(const std::string& name, int stages, int microbatches, int chunks_per_stage) {
  if (name == "interleaved") return make_interleaved_1f1b(stages, microbatches, chunks_per_stage);
  if (chunks_per_stage != 1 && (name == "gpipe" || name == "1f1b" || name == "zb-h1" || name == "sync-backward"))
    throw std::invalid_argument(name + " runs one chunk per stage (got chunks_per_stage " +
                                std::to_string(chunks_per_stage) + "); use 'interleaved' for more");
  if (name == "gpipe") return make_gpipe(stages, microbatches);
  if (name == "1f1b") return make_1f1b(stages, microbatches);
  if (name == "zb-h1") return make_zb_h1(stages, microbatches);
  if (name == "sync-backward") return make_sync_backward(stages, microbatches);
  std::string known;
  for (const auto& n : schedule_names()) known += (known.empty() ? "" : ", ") + n;
  throw std::invalid_argument("unknown schedule '" + name + "' (known: " + known + ")");
}

}  // namespace ap

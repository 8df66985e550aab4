// A schedule is data: one ordered list of actions per stage, which generators build, the validator checks, the
// simulator times and the actor runtime executes exactly.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ap {

// F: forward; B: full backward; I: input-gradient backward; W: weight-gradient backward (zero bubble);
// R: the data-parallel reduction of a chunk's gradients (Note [gradient reduction]).
enum class op : std::uint8_t { forward, backward, backward_input, backward_weight, reduce_grad };
inline constexpr std::size_t op_count = static_cast<std::size_t>(op::reduce_grad) + 1;

// The op names, in enum order: the notation's letter ("1F0"), the word of errors, the stage log's title and the
// SVG colour.
struct op_name {
  char letter;
  const char* word;
  const char* title;
  const char* colour;
};
inline constexpr std::array<op_name, op_count> op_names = {{
    {'F', "forward", "Forward", "#6fa8dc"},
    {'B', "backward", "Backward", "#93c47d"},
    {'I', "backward_input", "Backward-input", "#b6d7a8"},
    {'W', "backward_weight", "Backward-weight", "#c27ba0"},
    {'R', "reduce_grad", "Reduce-gradients", "#e69138"},
}};
static_assert(op_names.size() == op_count, "one name per op");

inline const op_name& name_of(op o) { return op_names[static_cast<std::size_t>(o)]; }
inline char op_letter(op o) { return name_of(o).letter; }
inline std::optional<op> op_of_letter(char letter) {
  for (std::size_t k = 0; k < op_count; ++k)
    if (op_names[k].letter == letter) return static_cast<op>(k);
  return std::nullopt;
}

// The microbatch of a whole-batch backward (printed "0B*"): Note [sync-backward].
inline constexpr int all_microbatches = -1;

// One step of one stage. `chunk`: the global chunk (virtual stage); `microbatch`: 0 .. m-1 or all_microbatches.
// Note [chunk layout]: chunk c lives on stage c % stages (round-robin, as Megatron-Core's interleaved 1F1B), so the
// forward of chunk c+1 follows chunk c on the next stage, wrapping from the last stage to the first.
struct action {
  int stage = 0;
  op kind = op::forward;
  int microbatch = 0;
  int chunk = 0;
  bool operator==(const action& o) const {
    return stage == o.stage && kind == o.kind && microbatch == o.microbatch && chunk == o.chunk;
  }
};

struct schedule {
  std::string name;          // "gpipe", "1f1b", "interleaved", "zb-h1", "sync-backward", or "custom"
  int stages = 1;            // p
  int chunks_per_stage = 1;  // v
  int microbatches = 1;      // m
  std::vector<std::vector<action>> per_stage;  // per_stage[s]: stage s's actions in execution order
  int total_chunks() const { return stages * chunks_per_stage; }
};

inline int stage_of_chunk(int chunk, int stages) { return chunk % stages; }

// Note [gradient reduction]: with data-parallel replicas, a chunk's gradients are summed across the replicas once
// final: the action R ("0R"), placed right after the chunk's last backward on its stage so the reduction overlaps
// the remaining backward. R only starts the collective; the optimizer step waits for it. One replica: no-op.
inline bool is_reduction(const action& a) { return a.kind == op::reduce_grad; }

// F, B and I run on a task that arrives (an activation, a gradient); W and R run on what the stage holds.
inline bool runs_on_arrival(op k) { return k != op::backward_weight && k != op::reduce_grad; }

// "1F0": chunk, op letter, microbatch (PyTorch's notation); "1B*" a whole-batch backward; "1R" a reduction.
// parse_action throws std::invalid_argument.
std::string to_string(const action& a);
action parse_action(const std::string& text, int stage);

// Generators. Each throws std::invalid_argument naming the parameter when it cannot build a schedule.
schedule make_gpipe(int stages, int microbatches);
schedule make_1f1b(int stages, int microbatches);
schedule make_interleaved_1f1b(int stages, int microbatches, int chunks_per_stage);
schedule make_zb_h1(int stages, int microbatches);
schedule make_sync_backward(int stages, int microbatches);
// By name: gpipe, 1f1b, interleaved, zb-h1, sync-backward.
schedule make_schedule(const std::string& name, int stages, int microbatches, int chunks_per_stage = 1);
std::vector<std::string> schedule_names();

// Note [sync-backward]: a backward that is not pipelined: once every loss is computed, each stage, last to first,
// runs one backward over the whole batch (caches joined, Note [joined caches]) and sends one gradient back: B of
// all_microbatches ("0B*"). A schedule runs every backward whole-batch or none.
// True when the schedule's backwards run on the whole batch.
bool whole_batch_backward(const schedule& s);

// `s` with one R per chunk right after the chunk's last backward (existing R dropped first: idempotent).
schedule with_gradient_reductions(schedule s);
bool has_gradient_reductions(const schedule& s);

// One row per stage: "0F0 0F1 0B0 0B1"; parse_grid infers m and v from the actions.
std::string to_grid(const schedule& s);
schedule parse_grid(const std::string& text, const std::string& name = "custom");
// CSV with header "stage,step,op,microbatch,chunk".
std::string to_csv(const schedule& s);
schedule parse_csv(const std::string& text, const std::string& name = "custom");

// Validation: one F and one B (or I and W) per microbatch and chunk on the chunk's stage; F before B/I, I before
// W, chunk k's F before chunk k+1's; no deadlock. On failure `message` holds the reason and the grid with the
// failing action marked "<-- ERROR HERE".
struct validation {
  bool ok = true;
  std::string message;
};
validation validate(const schedule& s);
// validate, and first that the schedule has the run's sizes (for a user's schedule file).
validation validate_for_run(const schedule& s, int stages, int microbatches, int chunks_per_stage);

// Simulation under per-stage op costs (time units); an empty vector means 1.0 everywhere.
struct op_costs {
  std::vector<double> forward, backward_input, backward_weight;  // backward (B) = I + W
  double transfer = 0.0;  // added to every cross-stage dependency
  double reduce_grad = 0.0;  // one R (a chunk's all-reduce), on its stage's communication lane
};
struct simulation {
  double makespan = 0.0;
  double ideal = 0.0;   // m * sum over stages of (F + B) / p: the time with no bubble
  double bubble = 0.0;  // makespan / ideal - 1
  std::vector<int> peak_stash;  // per stage: the most forward activations held at once
  struct span { int stage; action a; double start, end; };
  std::vector<span> spans;  // every action's simulated start and end (R: on the stage's communication lane)
};
// Throws std::invalid_argument (with the validator's message) for an invalid schedule.
simulation simulate(const schedule& s, const op_costs& costs = {});

// The simulated timeline as an SVG picture.
std::string to_svg(const schedule& s, const simulation& sim);

}  // namespace ap

// Which layers each chunk holds: uniform, balanced by parameters (DeepSpeed's 'parameters') or by measured time
// (torchgpipe's balance_by_time). Splits are contiguous, non-empty, given as layer counts per chunk.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "plan/stage_info.hpp"
#include "model/sequential.hpp"
#include "schedule/schedule.hpp"

namespace ap {

// Note [default partition]: `train` splits by parameters unless told otherwise (as DeepSpeed): uniform counts a
// GPT's embeddings and head as blocks, leaving its stages unequal. pipeline_options keeps uniform by default.
enum class partition_method { uniform, parameters, time };

// "uniform", "params" or "time"; anything else throws std::invalid_argument listing the three.
partition_method parse_partition_method(const std::string& name);
std::string to_string(partition_method m);

// Note [balanced split]: contiguous ranges of per-layer costs into `chunks` non-empty chunks, minimising the
// largest chunk sum, ties going to the smallest sum of squared chunk costs, then the most even layer counts (an
// exact dynamic programme; costs finite and non-negative). Throws std::invalid_argument when chunks < 1 or
// chunks > costs.size().
std::vector<std::size_t> balanced_counts(const std::vector<double>& costs, int chunks);

// The layer count of every chunk.
std::vector<std::size_t> chunk_layer_counts(const std::vector<layer_range>& chunk_ranges);

// uniform_chunk_ranges as counts: as equal as possible, the first chunks take the remainder.
std::vector<std::size_t> uniform_counts(std::size_t layers, int chunks);

std::vector<double> parameters_per_layer(const sequential& model);

// Wall seconds of one layer on one microbatch: forward, backward_input (I), backward_weight (W); B is I + W.
struct layer_cost {
  double forward_s = 0.0, backward_input_s = 0.0, backward_weight_s = 0.0;
  std::uint64_t stash_bytes = 0;  // what the layer's forward keeps for its backward (Note [memory model])
  std::uint64_t output_bytes = 0; // the layer's output (what a tensor-parallel all-reduce of it moves)
  // What the layer holds between its I and W (Note [memory model]).
  std::uint64_t input_held_bytes = 0;
  // The most the layer's forward or backward holds besides the stash (Note [tensor bytes]).
  std::uint64_t workspace_bytes = 0;
  double total_s() const { return forward_s + backward_input_s + backward_weight_s; }
};

// Times every layer on `sample` (one microbatch), forwards then backwards: one warm-up pass, then the median of
// `repeats`, on `threads` threads (Note [costs at the stages' threads]). Layer 0's backward_input counts 0 (the
// input's gradient is never computed). Works on a copy of the model.
std::vector<layer_cost> measure_layer_costs(const sequential& model, const tensor& sample, int repeats = 5,
                                            int threads = 1);

std::vector<double> total_costs(const std::vector<layer_cost>& costs);  // F + I + W per layer

// Note [whole blocks]: a block is a layer with parameters and the parameter-free layers after it (a Linear and
// its activation). partition_counts cuts only between blocks, so no stage holds a lone activation (a hop and a
// stash for almost no compute). Only a model with fewer blocks than chunks is cut between layers.
std::vector<std::size_t> block_sizes(const sequential& model);  // layers per block, in model order

// The split of `method` in whole blocks (Note [whole blocks]): uniform, or balancing the blocks' parameters or
// measured costs (Note [balanced split]). `costs` (one per layer) is only read by time.
std::vector<std::size_t> partition_counts(partition_method method, const sequential& model,
                                          const std::vector<layer_cost>& costs, int chunks);

// The chunks whose layers hold no parameter at all, in order.
std::vector<std::size_t> chunks_without_parameters(const sequential& model, const std::vector<layer_range>& chunk_ranges);

// Predicted busy seconds per stage for one step.
std::vector<double> predicted_busy_s(const std::vector<layer_cost>& costs, const std::vector<layer_range>& chunk_ranges,
                                     int stages, int microbatches);

// Note [costs at the stages' threads]: a layer's time depends on its intra-op threads, so predictions take each
// layer's costs as measured at the threads of its stage: `by_threads[t]` are costs on t threads,
// `stage_threads[s]` stage s's. Throws std::invalid_argument naming a stage whose thread count has no costs.
std::vector<layer_cost> costs_at_stage_threads(const std::map<int, std::vector<layer_cost>>& by_threads,
                                               const std::vector<int>& stage_threads,
                                               const std::vector<layer_range>& chunk_ranges);

// Per-stage op costs for ap::simulate. It charges each chunk 1/v of its stage's cost, so with unequal chunks the
// makespan is optimistic.
op_costs simulation_costs(const std::vector<layer_cost>& costs, const std::vector<layer_range>& chunk_ranges, int stages);

}  // namespace ap

// Which layers each chunk holds: uniform, balanced by parameter count (DeepSpeed's 'parameters'), or balanced
// by measured time (torchgpipe's balance_by_time). Every split is contiguous, gives every chunk at least one
// layer, and comes out as layer counts per chunk (pipeline_options::layers_per_chunk).
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

// Note [default partition]: `train` splits by parameters unless told otherwise (DeepSpeed's default too). The
// uniform split counts whole blocks, and a GPT's embeddings and head are blocks: its 16-layer model on 4 stages
// got 3, 5, 5 and 3 transformer blocks, and on the 16-core machine the stages were busy 593 / 1,050 / 1,046 /
// 606 ms a step. By parameters each stage holds 4 blocks, the embeddings on the first and the head on the last,
// as Megatron-Core places them (4 stages x 4 threads with ZB-H1: 10,310 tokens/s, docs/performance.md). The library's
// pipeline_options keeps uniform when given no split: a program states its own.
enum class partition_method { uniform, parameters, time };

// "uniform", "params" or "time"; anything else throws std::invalid_argument listing the three.
partition_method parse_partition_method(const std::string& name);
std::string to_string(partition_method m);

// Note [balanced split]:
// Contiguous ranges of per-layer costs into `chunks` non-empty chunks, minimising the largest chunk sum
// (the bottleneck: a pipeline runs at the pace of its slowest stage). Exact dynamic programme, O(chunks n^2):
// first the smallest bottleneck, then, among the splits that reach it, the one with the smallest sum of
// squared chunk costs (the other chunks as even as possible too), then the most even layer counts (so
// zero-cost layers such as ReLU do not pile up). Costs must be finite and non-negative. Throws
// std::invalid_argument when chunks < 1 or chunks > costs.size(), naming both.
std::vector<std::size_t> balanced_counts(const std::vector<double>& costs, int chunks);

// The layer count of every chunk (the inverse of chunk_ranges_from_counts).
std::vector<std::size_t> chunk_layer_counts(const std::vector<layer_range>& chunk_ranges);

// uniform_chunk_ranges as counts: as equal as possible, the first chunks take the remainder.
std::vector<std::size_t> uniform_counts(std::size_t layers, int chunks);

// Parameters of each layer (weights and biases).
std::vector<double> parameters_per_layer(const sequential& model);

// Wall seconds of one layer on one microbatch, as the pipeline runs it: forward, backward_input (I) and
// backward_weight (W); a full backward (B) is I + W.
struct layer_cost {
  double forward_s = 0.0, backward_input_s = 0.0, backward_weight_s = 0.0;
  std::uint64_t stash_bytes = 0;  // what the layer's forward keeps for its backward (Note [memory model])
  std::uint64_t output_bytes = 0; // the layer's output (what a tensor-parallel all-reduce of it moves)
  // What the layer holds between its backward_input and its backward_weight (a zero-bubble schedule's I and W):
  // its cache after backward_input (a block keeps its parts' dy's there) and the dy it was given, which its
  // Sequential keeps for the W (Note [memory model]).
  std::uint64_t input_held_bytes = 0;
  // The most the layer's forward or backward holds at once besides the stash (Note [memory model]'s
  // workspace): its input and output, or its dy and dx, and every temporary tensor, measured as the process's
  // tensor bytes (Note [tensor bytes]) rose above what was in use before, less the layer's own stash.
  std::uint64_t workspace_bytes = 0;
  double total_s() const { return forward_s + backward_input_s + backward_weight_s; }
};

// Times every layer on `sample` (one microbatch of the model's input), layer by layer, as a chain: the
// forwards in order, then the backwards in reverse, dy being the layer's own output for the last layer.
// One untimed warm-up pass, then the median of `repeats` passes per layer and op, on `threads` intra-op
// threads of the calling thread (a stage's threads, Note [costs at the stages' threads]); the caller's own
// setting is restored afterwards. Layer 0's backward_input counts 0: the pipeline never computes the model
// input's gradient. Works on a copy: the model's gradients are untouched.
std::vector<layer_cost> measure_layer_costs(const sequential& model, const tensor& sample, int repeats = 5,
                                            int threads = 1);

std::vector<double> total_costs(const std::vector<layer_cost>& costs);  // F + I + W per layer

// Note [whole blocks]:
// A block is a layer with parameters and the parameter-free layers after it (a Linear and its activation);
// parameter-free layers before the first parameterised one join the first block. partition_counts cuts only
// between blocks, so no stage holds a lone activation: that stage would add a hop and a stash and compute
// almost nothing. Only a model with fewer blocks than chunks (a toy model on many stages) is cut between
// layers; chunks_without_parameters then names the chunks that got no parameters.
std::vector<std::size_t> block_sizes(const sequential& model);  // layers per block, in model order

// The split of `method` for the model, in whole blocks (Note [whole blocks]): uniform gives every chunk as
// many blocks as possible (the first chunks take the remainder); parameters and time balance the blocks'
// parameter counts or measured costs (Note [balanced split]). `costs` (one per layer) is only read by time.
std::vector<std::size_t> partition_counts(partition_method method, const sequential& model,
                                          const std::vector<layer_cost>& costs, int chunks);

// The chunks whose layers hold no parameter at all (e.g. a lone ReLU), in order.
std::vector<std::size_t> chunks_without_parameters(const sequential& model, const std::vector<layer_range>& chunk_ranges);

// Predicted busy seconds per stage for one step: the sum of its chunks' layer costs (F + I + W) times the
// number of microbatches (chunk c on stage c % stages, Note [chunk layout] in schedule.hpp).
std::vector<double> predicted_busy_s(const std::vector<layer_cost>& costs, const std::vector<layer_range>& chunk_ranges,
                                     int stages, int microbatches);

// Note [costs at the stages' threads]: a layer's time depends on the intra-op threads it runs on, and every
// stage of a pipeline may run on several (--threads, or the cores divided among the stages). Predicted busy
// times and the simulated makespan take each layer's costs as measured at the threads of the stage that holds
// it: `by_threads[t]` are the layer costs measured on t threads, `stage_threads[s]` stage s's threads (chunk c on
// stage c % stages). Layer costs measured on one thread alone had predicted a one-stage pipeline on 2 threads at
// 1,537 ms a step where it ran 812 (the 4-layer GPT, batch 64). Throws std::invalid_argument naming a stage whose
// thread count has no costs, or a chunk beyond the costs.
std::vector<layer_cost> costs_at_stage_threads(const std::map<int, std::vector<layer_cost>>& by_threads,
                                               const std::vector<int>& stage_threads,
                                               const std::vector<layer_range>& chunk_ranges);

// Per-stage op costs for ap::simulate from measured layer costs (each stage: the sum over its chunks).
// ap::simulate charges each chunk 1/v of its stage's cost, so with unequal chunks (interleaved) the
// simulated makespan is optimistic.
op_costs simulation_costs(const std::vector<layer_cost>& costs, const std::vector<layer_range>& chunk_ranges, int stages);

}  // namespace ap

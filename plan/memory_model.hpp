// What a pipeline stage holds at its peak, predicted from the plan before any step (Note [memory model]), and
// the budget a plan must fit (--max-memory).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/optimizer.hpp"
#include "model/sequential.hpp"
#include "plan/partition.hpp"
#include "plan/stage_info.hpp"
#include "schedule/schedule.hpp"

namespace ap {

// Note [memory model]: a stage holds its parameters' values and gradients (float32 masters: 4 + 4 bytes a
// parameter), its optimizer's state (optimizer_state_bytes a parameter) and its stash. The stash follows the
// stage's own action order, which alone decides it: a forward adds its chunk's stash per microbatch (what each
// layer keeps for its backward, measured on one microbatch with the layer costs, recomputation and bf16 as they
// are), and the action that ends the activation (B, or W after an I) takes it away; between an I and its W a
// microbatch holds what the layers keep after backward_input (layer_cost::input_held_bytes). The peak of that walk
// is exact for GPipe, 1F1B, ZB-H1 and interleaved chunks, and for tensor-parallel ranks, each predicted on its own
// layers (Note [tensor-parallel memory] in model/tensor_parallel.hpp).
// On top: the workspace, the most one action holds besides the stash (its input in flight, its output or dx, its
// temporaries), the largest of the stage's layers' as measured (Note [tensor bytes]); and the weight copies a
// layer keeps between steps (layer::derived_bytes: a bfloat16 Linear's rounded weights, Note [bf16 weights kept
// widened] in model/linear.cpp), which the layer costs take out of their first forward's workspace.
// `train` prints its tensors' and resident growth beside the prediction, measured from after the layer costs
// once free pages went back to the system (return_free_memory); on eleven meshes the resident growth is
// 0.93-1.05x the prediction (docs/performance.md, "The memory model").
struct stage_memory {
  std::uint64_t parameters = 0, gradients = 0, optimizer_state = 0;  // bytes
  std::uint64_t stash = 0;      // bytes at the stage's peak
  int in_flight = 0;            // activations (microbatch-chunks) held at that peak
  std::uint64_t workspace = 0;  // the most one action holds besides the stash: its largest layer's
  std::uint64_t weight_copies = 0;  // bytes: the layers' derived_bytes (bf16 rounded weights)
  std::uint64_t total() const { return parameters + gradients + optimizer_state + stash + workspace + weight_copies; }
};

// The stash along each stage's action order, given each global chunk's stash per microbatch (and what it holds
// between an I and its W; empty: the stash): its peak bytes and the activations held then (Note [memory model]).
struct stash_peak {
  std::uint64_t bytes = 0;
  int activations = 0;
};
std::vector<stash_peak> stash_peaks(const schedule& s, const std::vector<std::uint64_t>& chunk_stash,
                                    const std::vector<std::uint64_t>& chunk_input_held = {});

// Bytes of optimizer state per parameter: Adam and AdamW 8 (two moments), SGD with momentum 4, plain SGD 0.
std::uint64_t optimizer_state_bytes(const optimizer_config& optimizer);

// Per stage of `s` (chunk c on stage c % stages, its layers ranges[c]): `stash_bytes[i]` is what layer i's
// forward keeps for one microbatch, `input_held_bytes[i]` what it holds between its I and its W (empty: the
// stash; layer_cost's fields of those names). stash_of and input_held_of read them from the layer costs.
// `workspace_bytes[i]` is layer i's layer_cost::workspace_bytes (empty: none counted); a stage's workspace is the
// largest of its layers'.
std::vector<stage_memory> predict_stage_memory(sequential& model, const std::vector<layer_range>& ranges,
                                               const schedule& s, const std::vector<std::uint64_t>& stash_bytes,
                                               const optimizer_config& optimizer,
                                               const std::vector<std::uint64_t>& input_held_bytes = {},
                                               const std::vector<std::uint64_t>& workspace_bytes = {});
// The same from measured layer costs: their stash, what they hold between I and W, and their workspace.
std::vector<stage_memory> predict_stage_memory(sequential& model, const std::vector<layer_range>& ranges,
                                               const schedule& s, const std::vector<layer_cost>& costs,
                                               const optimizer_config& optimizer);
std::vector<std::uint64_t> stash_of(const std::vector<layer_cost>& costs);
std::vector<std::uint64_t> input_held_of(const std::vector<layer_cost>& costs);

// "512M", "2G", "1.5GB", "300MiB", "1048576": bytes (K, M, G, T by powers of 1024, with or without "B"/"iB").
// Throws std::invalid_argument naming the text.
std::uint64_t parse_memory_size(const std::string& text);
// "84.0 MB" (powers of 1024, one decimal).
std::string memory_text(std::uint64_t bytes);
// ", weight copies 23.0 MB" (Note [memory model]); empty for 0 bytes (a float32 model has none).
std::string weight_copies_text(std::uint64_t bytes);

// This process's resident memory now and at its peak (VmRSS and VmHWM of /proc/self/status; zeros where
// there is none). reset_peak_resident_memory() makes the peak the current figure (writes 5 to
// /proc/self/clear_refs); false where the kernel does not allow it. Together they measure what a run adds.
struct resident_memory {
  std::uint64_t now = 0, peak = 0;  // bytes
};
resident_memory measure_resident_memory();
bool reset_peak_resident_memory();

// Note [memory budget]: --max-memory is what one process may hold: this process, for stages in it (every
// replica's: D copies), or each node, for the stages placed on it (replica d's stage s on node
// (d * stages + s) % nodes, Note [data-parallel nodes]). A holder is a process and the stages it holds.
struct memory_holder {
  std::string name;         // "this process", "node 10.0.0.2:4242"
  std::vector<int> stages;  // a stage once per replica that places it here
};
// A stage's T tensor-parallel ranks together, bounded from the whole stage's figures (what --auto's planner
// counts): its weights, gradients and optimizer state once (the ranks split the split layers' and repeat the
// rest, small beside them), its stash once per rank (an upper bound: a column-parallel layer keeps its whole
// input on every rank). Identity for T = 1.
std::vector<stage_memory> across_tensor_parallel(std::vector<stage_memory> stages, int tensor_parallel);
// Note [tensor-parallel memory] (model/tensor_parallel.hpp): a stage's T ranks together from one rank's exact
// figures, predicted on tensor_parallel_rank's model: T times each part (T divides every split width, so the
// ranks hold equal shards). Identity for T = 1.
std::vector<stage_memory> of_all_ranks(std::vector<stage_memory> rank, int tensor_parallel);

// The holders of `stages` stages of `replicas` replicas: one, this process, without nodes; else one per node
// that holds any.
std::vector<memory_holder> memory_holders(int stages, int replicas, const std::vector<std::string>& nodes);

// Empty when every holder's stages together fit `budget` bytes; else names the first holder over it, its total
// and each of its stages' figures with their parts, and what would fit: more stages or nodes, fewer
// microbatches in flight (another schedule), recomputation, bf16.
std::string over_budget(const std::vector<stage_memory>& stages, const std::vector<memory_holder>& holders,
                        std::uint64_t budget);

}  // namespace ap

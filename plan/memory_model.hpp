// What a pipeline stage holds at its peak, predicted before any step, and the budget it must fit (--max-memory).
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

// Note [memory model]: a stage holds its parameters' values and gradients, its optimizer's state and its stash.
// The stash follows the stage's action order: F adds its chunk's measured stash, B (or W after I) frees it, and
// between I and W a microbatch holds input_held_bytes. The walk's peak is exact for every schedule and, per rank,
// for tensor-parallel ranks. On top: the workspace (the largest layer's) and the layers' weight copies
// (derived_bytes). docs/performance.md compares it with resident memory.
struct stage_memory {
  std::uint64_t parameters = 0, gradients = 0, optimizer_state = 0;  // bytes
  std::uint64_t stash = 0;      // bytes at the stage's peak
  int in_flight = 0;            // activations (microbatch-chunks) held at that peak
  std::uint64_t workspace = 0;  // the most one action holds besides the stash: its largest layer's
  std::uint64_t weight_copies = 0;  // bytes: the layers' derived_bytes (bf16 rounded weights)
  std::uint64_t total() const { return parameters + gradients + optimizer_state + stash + workspace + weight_copies; }
};

// Each stage's stash peak along its action order, given each chunk's stash per microbatch (and what it holds
// between I and W; empty: the stash).
struct stash_peak {
  std::uint64_t bytes = 0;
  int activations = 0;
};
std::vector<stash_peak> stash_peaks(const schedule& s, const std::vector<std::uint64_t>& chunk_stash,
                                    const std::vector<std::uint64_t>& chunk_input_held = {});

// Bytes of optimizer state per parameter: Adam and AdamW 8 (two moments), SGD with momentum 4, plain SGD 0.
std::uint64_t optimizer_state_bytes(const optimizer_config& optimizer);

// Per stage of `s` (chunk c's layers ranges[c]), from layer i's layer_cost fields of the same names (empty
// input_held_bytes: the stash; empty workspace_bytes: none). A stage's workspace is its largest layer's.
std::vector<stage_memory> predict_stage_memory(sequential& model, const std::vector<layer_range>& ranges,
                                               const schedule& s, const std::vector<std::uint64_t>& stash_bytes,
                                               const optimizer_config& optimizer,
                                               const std::vector<std::uint64_t>& input_held_bytes = {},
                                               const std::vector<std::uint64_t>& workspace_bytes = {});
// The same from measured layer costs.
std::vector<stage_memory> predict_stage_memory(sequential& model, const std::vector<layer_range>& ranges,
                                               const schedule& s, const std::vector<layer_cost>& costs,
                                               const optimizer_config& optimizer);
std::vector<std::uint64_t> stash_of(const std::vector<layer_cost>& costs);
std::vector<std::uint64_t> input_held_of(const std::vector<layer_cost>& costs);

// "512M", "2G", "1.5GB", "300MiB", "1048576": bytes (powers of 1024). Throws std::invalid_argument naming the text.
std::uint64_t parse_memory_size(const std::string& text);
// "84.0 MB" (powers of 1024, one decimal).
std::string memory_text(std::uint64_t bytes);
// ", weight copies 23.0 MB" (Note [memory model]); empty for 0 bytes (a float32 model has none).
std::string weight_copies_text(std::uint64_t bytes);

// This process's resident memory now and at its peak (VmRSS, VmHWM; zeros where unknown).
// reset_peak_resident_memory() makes the peak the current figure; false where the kernel refuses.
struct resident_memory {
  std::uint64_t now = 0, peak = 0;  // bytes
};
resident_memory measure_resident_memory();
bool reset_peak_resident_memory();

// Note [memory budget]: --max-memory is what one process may hold: this process, for its stages (every replica's),
// or each node, for the stages placed on it (Note [data-parallel nodes]). A holder is a process and its stages.
struct memory_holder {
  std::string name;         // "this process", "node 10.0.0.2:4242"
  std::vector<int> stages;  // a stage once per replica that places it here
};
// A stage's T ranks together, bounded from the whole stage's figures (as --auto counts): weights, gradients and
// optimizer state once, the stash once per rank (an upper bound). Identity for T = 1.
std::vector<stage_memory> across_tensor_parallel(std::vector<stage_memory> stages, int tensor_parallel);
// A stage's T ranks together from one rank's exact figures (Note [tensor-parallel memory]). Identity for T = 1.
std::vector<stage_memory> of_all_ranks(std::vector<stage_memory> rank, int tensor_parallel);

// The holders of the stages: this process without nodes; else one per node that holds any.
std::vector<memory_holder> memory_holders(int stages, int replicas, const std::vector<std::string>& nodes);

// Empty when every holder fits `budget` bytes; else names the first over it, its stages' figures and what would fit.
std::string over_budget(const std::vector<stage_memory>& stages, const std::vector<memory_holder>& holders,
                        std::uint64_t budget);

}  // namespace ap

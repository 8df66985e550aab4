// What a pipeline stage holds at its peak, predicted from the plan before any step (Note [memory model]), and
// the budget a plan must fit (--max-memory).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/optimizer.hpp"
#include "model/sequential.hpp"
#include "plan/stage_info.hpp"

namespace ap {

// Note [memory model]: a stage holds its parameters' values and gradients (float32 masters: 4 + 4 bytes a
// parameter), its optimizer's state (optimizer_state_bytes a parameter) and its stash: the schedule's most
// activations in flight on the stage (the simulator's peak_stash, in microbatch-chunks) times the largest of
// its chunks' stash per microbatch (what each layer's forward keeps for its backward, measured on one
// microbatch with the layer costs: recomputing blocks and bf16 stashes count as they are). Exact for GPipe and
// 1F1B (one chunk per stage, each backward whole: tested against the stages' measured peak); with interleaved
// chunks an upper bound (every activation counted at the stage's largest chunk: 2x stage 0's measured peak for
// the 4-layer GPT on 2 stages x 2 chunks, whose stage 0 holds the embeddings and two blocks); under it for a
// zero-bubble schedule, which also keeps every layer's dy between its I and its W (0.72x stage 1's there).
// Not counted either: the workspace of the action running (its inputs, outputs and oneDNN scratchpads), the
// tensors in flight between stages, and the process's own code and buffers.
struct stage_memory {
  std::uint64_t parameters = 0, gradients = 0, optimizer_state = 0;  // bytes
  std::uint64_t stash = 0;  // bytes: in_flight x stash_per_activation
  int in_flight = 0;
  std::uint64_t stash_per_activation = 0;
  std::uint64_t total() const { return parameters + gradients + optimizer_state + stash; }
};

// Bytes of optimizer state per parameter: Adam and AdamW 8 (two moments), SGD with momentum 4, plain SGD 0.
std::uint64_t optimizer_state_bytes(const optimizer_config& optimizer);

// Per stage (chunk c on stage c % stages): `stash_bytes[i]` is what layer i's forward keeps for one microbatch,
// `peak_stash[s]` the most activations stage s holds at once (simulation::peak_stash).
std::vector<stage_memory> predict_stage_memory(sequential& model, const std::vector<layer_range>& ranges, int stages,
                                               const std::vector<std::uint64_t>& stash_bytes,
                                               const std::vector<int>& peak_stash, const optimizer_config& optimizer);

// "512M", "2G", "1.5GB", "300MiB", "1048576": bytes (K, M, G, T by powers of 1024, with or without "B"/"iB").
// Throws std::invalid_argument naming the text.
std::uint64_t parse_memory_size(const std::string& text);
// "84.0 MB" (powers of 1024, one decimal).
std::string memory_text(std::uint64_t bytes);

// Empty when every stage fits `budget` bytes; else names the first stage over it, its figure and parts, and
// what would fit: more stages, fewer microbatches in flight (another schedule), recomputation, bf16.
std::string over_budget(const std::vector<stage_memory>& stages, std::uint64_t budget);

}  // namespace ap

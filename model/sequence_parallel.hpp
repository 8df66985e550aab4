// Sequence parallelism beside tensor parallelism (Megatron's).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "collective/process_group.hpp"
#include "model/sequential.hpp"

namespace ap {

// Note [sequence parallelism]: between a block's split Linears, rank r holds rows [r N / T, (r + 1) N / T) of
// the N = b s rows, shape (b, s / T, D) (T divides s), instead of every rank computing norms and residuals on
// all rows. Column layers all-gather their input and reduce-scatter dx; row layers the reverse. A chunk's run
// of qualifying blocks scatters at its start and gathers at its end, so stages and checkpoints see whole
// tensors. A block with dropout stays whole (its mask hashes whole-batch rows).

// One rank's shape of `whole`: (b, s / T, ...), or (n / T, D) for 2 axes. Throws std::invalid_argument naming
// `who` and the shape when T does not divide it.
shape_t sequence_shard_shape(const shape_t& whole, std::size_t ranks, const std::string& who);
// sequence_shard_shape's inverse.
shape_t sequence_whole_shape(const shape_t& shard, std::size_t ranks);
// This rank's rows of `whole`, copied.
tensor sequence_shard(const tensor& whole, const process_group& group, const std::string& who);
// Every rank's rows all-gathered in rank order; waits.
tensor sequence_gather(const tensor& shard, process_group& group);
// Starts the reduce-scatter of `whole` (partial values; the collective's until the wait) into `shard`.
collective_handle start_sequence_reduce_scatter(tensor& whole, tensor& shard, process_group& group);

// Whether a tensor-parallel block spec can run on a rank's rows: its parts take and give rows, one is split.
bool runs_on_sequence_shards(const std::string& spec);
// How many of a chunk's tensor-parallel `specs` run on rows.
std::size_t sequence_shard_blocks(const std::vector<std::string>& specs);

// Throws std::invalid_argument for one rank or no block that runs_on_sequence_shards once split.
void check_sequence_parallel(const std::vector<std::string>& specs, int tensor_parallel);

// Makes every run of qualifying blocks of `model` (joined to `group`) run on rows; runs end at chunk ends.
// Returns the blocks divided.
std::size_t enable_sequence_parallel(sequential& model, const std::shared_ptr<process_group>& group,
                                     const std::vector<std::size_t>& chunk_layers = {});

}  // namespace ap

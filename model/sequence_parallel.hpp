// Sequence parallelism beside tensor parallelism (Megatron's and InfiniTrain's): the activations between the
// split Linears are divided over the tensor-parallel ranks by rows, not repeated on each.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "collective/process_group.hpp"
#include "model/sequential.hpp"

namespace ap {

// Note [sequence parallelism]: between a block's split Linears every tensor-parallel rank would compute the
// norms and residuals on all N = b s rows. Here rank r holds rows [r N / T, (r + 1) N / T), shape (b, s / T, D)
// (T divides s). A column layer all-gathers its input and reduce-scatters its dx; a row layer reduce-scatters its
// output and all-gathers its dy: together what the all-reduces they replace cost, plus one more all-gather of a
// column layer's input for its weight gradient (it keeps only its rows) and one all-reduce of each block's norm
// gradients (each rank sums over its rows only). A chunk's run of consecutive qualifying blocks scatters at its
// start and gathers at its end, so stages exchange whole tensors and checkpoints are the unsplit model's. A block
// holding dropout stays whole: its mask hashes each row's place in the whole batch.

// The shape of one rank's rows of `whole` over `ranks` ranks: (b, s / T, ...) for 3 or more axes, (n / T, D) for
// 2. Throws std::invalid_argument naming `who` and the shape when T does not divide that axis.
shape_t sequence_shard_shape(const shape_t& whole, std::size_t ranks, const std::string& who);
// The whole shape of one rank's rows `shard` (sequence_shard_shape's inverse).
shape_t sequence_whole_shape(const shape_t& shard, std::size_t ranks);
// This rank's rows of `whole` (a copy), shaped by sequence_shard_shape.
tensor sequence_shard(const tensor& whole, const process_group& group, const std::string& who);
// Every rank's rows of `shard`, all-gathered in rank order into the whole shape; waits for the collective.
tensor sequence_gather(const tensor& shard, process_group& group);
// Starts the reduce-scatter of `whole` (every rank's partial values of all rows; reshaped to 2 axes, so it
// belongs to the collective until the wait) into `shard`, 2 axes; sequence_shard_shape gives its shape after.
collective_handle start_sequence_reduce_scatter(tensor& whole, tensor& shard, process_group& group);

// Whether the block spec `spec` (a tensor-parallel spec: tensor_parallel_specs has run) can run on a rank's rows:
// its parts take rows and give rows (norms, element-wise activations, residual blocks of those, column layers
// followed by row layers, head-parallel attention, parallel SwiGLU) and at least one of them is split.
bool runs_on_sequence_shards(const std::string& spec);
// How many of `specs` (a chunk's tensor-parallel specs) run on rows: the blocks sequence parallelism divides.
std::size_t sequence_shard_blocks(const std::vector<std::string>& specs);

// Throws std::invalid_argument when sequence parallelism cannot divide the model `specs` over `tensor_parallel`
// ranks: one rank, or no block that runs_on_sequence_shards once split.
void check_sequence_parallel(const std::vector<std::string>& specs, int tensor_parallel);

// Makes every run of consecutive blocks of `model` that runs_on_sequence_shards (after join_tensor_parallel with
// `group`) run on the group's rows: the run's first block scatters, its last gathers, its split layers change
// their collectives, and each block sums its norms' gradients over the group. A run ends where a chunk of
// `chunk_layers` (layer counts in order; none: one chunk) ends. Returns the blocks it divided (0 with a group of
// one rank).
std::size_t enable_sequence_parallel(sequential& model, const std::shared_ptr<process_group>& group,
                                     const std::vector<std::size_t>& chunk_layers = {});

}  // namespace ap

// Sequence parallelism beside tensor parallelism (Megatron's): the activations between the split Linears are
// divided over the tensor-parallel ranks by rows.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "collective/process_group.hpp"
#include "model/sequential.hpp"

namespace ap {

// Note [sequence parallelism]: rather than every tensor-parallel rank computing norms and residuals on all
// N = b s rows, rank r holds rows [r N / T, (r + 1) N / T), shape (b, s / T, D) (T divides s). A column layer
// all-gathers its input and reduce-scatters its dx; a row layer reduce-scatters its output and all-gathers its
// dy: the cost of the all-reduces they replace, plus a gather for the weight gradient and an all-reduce of the
// norms' gradients. A chunk's run of qualifying blocks scatters at its start and gathers at its end, so stages
// and checkpoints see whole tensors. A block with dropout stays whole (its mask hashes whole-batch rows).

// One rank's shape of `whole`: (b, s / T, ...) for 3 or more axes, (n / T, D) for 2. Throws
// std::invalid_argument naming `who` and the shape when T does not divide that axis.
shape_t sequence_shard_shape(const shape_t& whole, std::size_t ranks, const std::string& who);
// The whole shape of one rank's rows `shard` (sequence_shard_shape's inverse).
shape_t sequence_whole_shape(const shape_t& shard, std::size_t ranks);
// This rank's rows of `whole` (a copy), shaped by sequence_shard_shape.
tensor sequence_shard(const tensor& whole, const process_group& group, const std::string& who);
// Every rank's rows of `shard`, all-gathered in rank order into the whole shape; waits.
tensor sequence_gather(const tensor& shard, process_group& group);
// Starts the reduce-scatter of `whole` (every rank's partial values; the collective's until the wait) into
// `shard`, 2 axes.
collective_handle start_sequence_reduce_scatter(tensor& whole, tensor& shard, process_group& group);

// Whether the tensor-parallel block spec `spec` can run on a rank's rows: its parts take and give rows and at
// least one is split.
bool runs_on_sequence_shards(const std::string& spec);
// How many of a chunk's tensor-parallel `specs` run on rows.
std::size_t sequence_shard_blocks(const std::vector<std::string>& specs);

// Throws std::invalid_argument for one rank or no block that runs_on_sequence_shards once split.
void check_sequence_parallel(const std::vector<std::string>& specs, int tensor_parallel);

// Makes every run of consecutive qualifying blocks of `model` (joined to `group`) run on the group's rows; a run
// ends where a chunk of `chunk_layers` ends. Returns the blocks divided (0 for a group of one).
std::size_t enable_sequence_parallel(sequential& model, const std::shared_ptr<process_group>& group,
                                     const std::vector<std::size_t>& chunk_layers = {});

}  // namespace ap

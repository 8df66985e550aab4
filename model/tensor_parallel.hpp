// A whole model made tensor-parallel: which Linear layers split (the Megatron pairing), joining a model's
// parallel layers to a group, and cutting / gathering parameters between a whole model and its shards.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "collective/process_group.hpp"
#include "model/parallel_linear.hpp"
#include "model/sequential.hpp"

namespace ap {

// Note [Megatron pairing]: in a plain MLP ("linear:784:512", "relu", "linear:512:256", ...) the Linear
// layers pair up as column -> element-wise -> row, so each pair costs one all-reduce forward and one
// backward (Note [tensor-parallel layers]); a last unpaired Linear stays whole, computed by every rank
// (for a classifier head of 10 outputs, splitting would cost more in the all-reduce than it saves).
// Only Linear layers directly in the model pair, and only across activations (relu, gelu, tanh, sigmoid);
// any other layer between two Linears ends the pair (dropout too: its mask counts units of the whole
// width). Returns the new specs.
std::vector<std::string> megatron_mlp_specs(const std::vector<std::string>& specs);

// The specs of `specs` (a model or any slice of one, e.g. a pipeline chunk) with every layer that can be
// split over tensor-parallel ranks made parallel: the Megatron pairing (megatron_mlp_specs).
std::vector<std::string> tensor_parallel_specs(const std::vector<std::string>& specs);

// Every layer of `model`, blocks' parts included (depth first, in order), that is a tensor-parallel layer.
std::vector<tensor_parallel_layer*> tensor_parallel_layers(sequential& model);

// How many tensor-parallel layers `l` is or holds (a block's parts included).
std::size_t tensor_parallel_parts(layer& l);

// Makes every tensor-parallel layer of `model` join `group`; returns how many joined.
std::size_t join_tensor_parallel(sequential& model, const std::shared_ptr<process_group>& group);

// The axis each sharded parameter value of `model` is sliced on, by value pointer (absent: whole).
std::map<const tensor*, int> sharded_axes(sequential& model);
// The same by parameter name ("3.weight" -> 1).
std::map<std::string, int> sharded_axes_by_name(sequential& model);
// The axis a named tensor is cut on: a parameter's own ("3.weight"), or for its optimizer state
// ("3.weight.m") its parameter's; -1 when it is whole on every rank.
int sharded_axis_of(const std::string& name, const std::map<std::string, int>& axes);

// Pieces (one per rank, in rank order) joined along `axis` (0: rows or elements, 1: columns) into `whole`,
// or `whole` cut into its piece for `rank` of `ranks` (shard_rows over that axis).
void gather_along(const std::vector<const tensor*>& pieces, int axis, tensor& whole);
tensor piece_along(const tensor& whole, int axis, std::size_t rank, std::size_t ranks);
// gather_along into a new tensor of the pieces' joined shape.
tensor gather_pieces(const std::vector<const tensor*>& pieces, int axis);

}  // namespace ap

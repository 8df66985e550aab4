// A whole model made tensor-parallel: which layers split, joining them to a group, cutting and gathering shards.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "collective/process_group.hpp"
#include "model/parallel_linear.hpp"
#include "model/sequential.hpp"

namespace ap {

// Note [Megatron pairing]: in a plain MLP the Linears pair up as column -> element-wise -> row (Note
// [tensor-parallel layers]); a last unpaired Linear (a small head) stays whole. Pairs span only activations
// (relu, gelu, tanh, sigmoid); any other layer ends a pair (dropout's mask counts whole-width units).
std::vector<std::string> megatron_mlp_specs(const std::vector<std::string>& specs);

// Note [tensor-parallel specs]: `specs` (a model or a chunk) with every splittable layer made parallel:
// Linears paired in the list and inside every composite (never across its edge), attention head-parallel,
// SwiGLU split by hidden units. A GPT block costs 2 all-reduces forward and 2 backward. Embeddings, final
// norm and LM head stay whole, unless `vocab` splits them (Note [vocab-parallel]).
struct vocabulary_split {
  bool embeddings = false;
  bool head = false;  // the list ends the model: its last Linear is the LM head
};
std::vector<std::string> tensor_parallel_specs(const std::vector<std::string>& specs, vocabulary_split vocab = {});

// Every tensor-parallel layer of `model`, blocks' parts included, depth first.
std::vector<tensor_parallel_layer*> tensor_parallel_layers(sequential& model);

// How many tensor-parallel layers `l` is or holds.
std::size_t tensor_parallel_parts(layer& l);

// The layers that are or hold tensor-parallel ones, by global index, neighbours merged ("2-5 block (...)");
// empty when nothing splits.
std::string split_layers_text(sequential& model);

// Joins every tensor-parallel layer of `model` to `group`; returns how many.
std::size_t join_tensor_parallel(sequential& model, const std::shared_ptr<process_group>& group);

// Note [tensor-parallel memory]: what rank `rank` of `T` holds of `model` cut into chunks of `chunk_layers`:
// each chunk made tensor-parallel on its own and joined to a lone_rank_group, whose collectives return at
// once. Its parameters and caches are exactly the rank's, so the memory model measures a tensor-parallel
// stage on it; its outputs are meaningless. Throws std::invalid_argument for a width T does not divide.
sequential tensor_parallel_rank(const sequential& model, const std::vector<std::size_t>& chunk_layers, int rank, int T,
                                bool split_vocabulary = false, bool split_sequence = false);

// How each sharded parameter is cut (Note [shard blocks]), by value or by name; absent: whole.
std::map<const tensor*, shard_layout> sharded_layouts(sequential& model);
std::map<std::string, shard_layout> sharded_layouts_by_name(sequential& model);
// How a named tensor (or its optimizer state, "3.weight.m") is cut; axis -1: whole.
shard_layout sharded_layout_of(const std::string& name, const std::map<std::string, shard_layout>& layouts);

// Pieces (in rank order) joined into `whole`, or `whole` cut into `rank`'s piece. Throw
// std::invalid_argument when the pieces do not fit.
void gather_along(const std::vector<const tensor*>& pieces, shard_layout layout, tensor& whole);
tensor piece_along(const tensor& whole, shard_layout layout, std::size_t rank, std::size_t ranks);
// gather_along into a new tensor of the pieces' joined shape.
tensor gather_pieces(const std::vector<const tensor*>& pieces, shard_layout layout);

}  // namespace ap

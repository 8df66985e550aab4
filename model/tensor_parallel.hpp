// A whole model made tensor-parallel: which layers split, joining them to a group, and cutting / gathering
// parameters between a whole model and its shards.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "collective/process_group.hpp"
#include "model/parallel_linear.hpp"
#include "model/sequential.hpp"

namespace ap {

// Note [Megatron pairing]: in a plain MLP the Linear layers pair up as column -> element-wise -> row, one
// all-reduce forward and one backward per pair (Note [tensor-parallel layers]). A last unpaired Linear stays
// whole (a small classifier head costs more to all-reduce than it saves). Only Linears directly in the list
// pair, and only across activations (relu, gelu, tanh, sigmoid); any other layer, dropout too (its mask
// counts units of the whole width), ends the pair. Returns the new specs.
std::vector<std::string> megatron_mlp_specs(const std::vector<std::string>& specs);

// Note [tensor-parallel specs]: `specs` (a model or a slice, e.g. a pipeline chunk) with every splittable
// layer made parallel: Linears paired (megatron_mlp_specs) in the list and inside every block[...] and
// residual[...] (never across a composite's edge), attention made head-parallel (Note [head-parallel
// attention]), SwiGLU split by hidden units (Note [tensor-parallel SwiGLU]). A GPT block's two residual
// branches each take and give whole tensors: 2 all-reduces forward and 2 backward per block. Embeddings,
// final norm and LM head stay whole. With `vocab` (Note [vocab-parallel]) embeddings split their tokens and,
// with `vocab.head`, a last whole Linear becomes the vocabulary-split head.
struct vocabulary_split {
  bool embeddings = false;
  bool head = false;  // the list ends the model: its last Linear is the LM head
};
std::vector<std::string> tensor_parallel_specs(const std::vector<std::string>& specs, vocabulary_split vocab = {});

// Every layer of `model`, blocks' parts included (depth first, in order), that is a tensor-parallel layer.
std::vector<tensor_parallel_layer*> tensor_parallel_layers(sequential& model);

// How many tensor-parallel layers `l` is or holds (a block's parts included).
std::size_t tensor_parallel_parts(layer& l);

// The layers of `model` that are or hold tensor-parallel layers, by global index, equal neighbours as one
// range: "0 column_linear:12:10", "2-5 block (head_parallel_attention:16:4, ...)"; empty when nothing splits.
std::string split_layers_text(sequential& model);

// Makes every tensor-parallel layer of `model` join `group`; returns how many joined.
std::size_t join_tensor_parallel(sequential& model, const std::shared_ptr<process_group>& group);

// Note [tensor-parallel memory]: what rank `rank` of `T` holds of `model` cut into chunks of `chunk_layers`
// (a pipeline's chunks): each chunk made tensor-parallel on its own, dtype and recomputation kept, joined to a
// lone_rank_group (collective/lone_rank_group.hpp), whose collectives return at once. Its parameters and
// caches are exactly the rank's, so the memory model measures a tensor-parallel stage on it; its outputs are
// meaningless (for shapes and bytes only). Throws std::invalid_argument for a width T does not divide.
// `split_vocabulary`: Note [vocab-parallel]; `split_sequence`: Note [sequence parallelism].
sequential tensor_parallel_rank(const sequential& model, const std::vector<std::size_t>& chunk_layers, int rank, int T,
                                bool split_vocabulary = false, bool split_sequence = false);

// How each sharded parameter of `model` is cut (Note [shard blocks]), by value pointer or by name; absent:
// whole on every rank.
std::map<const tensor*, shard_layout> sharded_layouts(sequential& model);
std::map<std::string, shard_layout> sharded_layouts_by_name(sequential& model);
// How a named tensor is cut: a parameter's own, or for optimizer state ("3.weight.m") its parameter's;
// axis -1: whole.
shard_layout sharded_layout_of(const std::string& name, const std::map<std::string, shard_layout>& layouts);

// Pieces (one per rank, in rank order) joined into `whole` as `layout` cuts it, or `whole` cut into `rank`'s
// piece. Throw std::invalid_argument when the pieces do not fit the whole.
void gather_along(const std::vector<const tensor*>& pieces, shard_layout layout, tensor& whole);
tensor piece_along(const tensor& whole, shard_layout layout, std::size_t rank, std::size_t ranks);
// gather_along into a new tensor of the pieces' joined shape.
tensor gather_pieces(const std::vector<const tensor*>& pieces, shard_layout layout);

}  // namespace ap

// A whole model made tensor-parallel: which layers split (the Megatron pairing of Linear layers, attention
// heads), joining a model's parallel layers to a group, and cutting / gathering parameters between a whole
// model and its shards.
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

// Note [tensor-parallel specs]: the specs of `specs` (a model or any slice of one, e.g. a pipeline chunk)
// with every layer that can be split over tensor-parallel ranks made parallel: the Megatron pairing of
// Linear layers (megatron_mlp_specs) in the list and, the same way, inside every block[...] and
// residual[...] (a pair never spans a composite's edge), every attention made head-parallel (Note
// [head-parallel attention]) and every SwiGLU MLP split by hidden units (Note [tensor-parallel SwiGLU] in
// model/parallel_swiglu.hpp). A GPT block, block[residual[layernorm,attention],residual[layernorm,linear,
// gelu,linear]], becomes block[residual[layernorm,head_parallel_attention],residual[layernorm,column_linear,
// gelu,row_linear]]: its two residual branches each take whole inputs and give whole outputs, so the block
// costs exactly 2 all-reduces forward (the two row-wise projections) and 2 backward (the dx of the two
// column-wise ones). The embeddings, the final LayerNorm and the LM head (a last Linear with no partner)
// stay whole, computed alike by every rank.
// With `vocab` (Note [vocab-parallel] in model/vocab_parallel.hpp): every embedding splits its tokens, and with
// `vocab.head` a last Linear left whole becomes the vocabulary-split head.
struct vocabulary_split {
  bool embeddings = false;
  bool head = false;  // the list ends the model: its last Linear is the LM head
};
std::vector<std::string> tensor_parallel_specs(const std::vector<std::string>& specs, vocabulary_split vocab = {});

// Every layer of `model`, blocks' parts included (depth first, in order), that is a tensor-parallel layer.
std::vector<tensor_parallel_layer*> tensor_parallel_layers(sequential& model);

// How many tensor-parallel layers `l` is or holds (a block's parts included).
std::size_t tensor_parallel_parts(layer& l);

// The layers of `model` that are or hold tensor-parallel layers, by global index: a split layer as its spec
// ("0 column_linear:12:10"), a composite as its kind and its split parts ("2 block (head_parallel_attention:16:4,
// column_linear:16:64, row_linear:64:16)"), equal neighbours (a GPT's blocks) as one range ("2-5 block (...)");
// empty when nothing is split. Found by asking the layers, so a user's tensor-parallel layer is named too.
std::string split_layers_text(sequential& model);

// Makes every tensor-parallel layer of `model` join `group`; returns how many joined.
std::size_t join_tensor_parallel(sequential& model, const std::shared_ptr<process_group>& group);

// Note [tensor-parallel memory]: what rank `rank` of `T` holds of `model` cut into chunks of `chunk_layers`
// layers (a pipeline's chunks; one chunk of every layer without stages): each chunk's layers made
// tensor-parallel on their own (tensor_parallel_specs, so no Linear pairs across a chunk's edge, as in the
// stages), the model's compute dtype and recomputation kept, joined as that rank of a lone_rank_group
// (collective/lone_rank_group.hpp), whose collectives return at once. Its parameters are the rank's shards (and the whole layers every rank repeats), and its layers' caches
// after a forward are exactly the rank's: the memory model measures a tensor-parallel stage's stash and weights
// on it, per rank, instead of bounding them from the whole layers. Its outputs are not the model's (the
// reductions are skipped): for shapes and bytes only. Throws std::invalid_argument for a width T does not divide.
// With `split_vocabulary` its embeddings and its last chunk's head hold the rank's tokens (Note [vocab-parallel]);
// with `split_sequence` each chunk's runs of blocks hold the rank's rows (Note [sequence parallelism]).
sequential tensor_parallel_rank(const sequential& model, const std::vector<std::size_t>& chunk_layers, int rank, int T,
                                bool split_vocabulary = false, bool split_sequence = false);

// How each sharded parameter value of `model` is cut (Note [shard blocks]), by value pointer or by
// parameter name ("3.0.1.qkv.weight" -> columns in 3 blocks); absent: whole on every rank.
std::map<const tensor*, shard_layout> sharded_layouts(sequential& model);
std::map<std::string, shard_layout> sharded_layouts_by_name(sequential& model);
// How a named tensor is cut: a parameter's own ("3.weight"), or for its optimizer state ("3.weight.m") its
// parameter's; axis -1 when it is whole on every rank.
shard_layout sharded_layout_of(const std::string& name, const std::map<std::string, shard_layout>& layouts);

// Pieces (one per rank, in rank order) joined into `whole` as `layout` cut it (an int converts to a layout
// of one block: 0 rows or elements, 1 columns), or `whole` cut into its piece for `rank` of `ranks` (each
// block split by shard_rows). Throw std::invalid_argument when the pieces do not fit the whole.
void gather_along(const std::vector<const tensor*>& pieces, shard_layout layout, tensor& whole);
tensor piece_along(const tensor& whole, shard_layout layout, std::size_t rank, std::size_t ranks);
// gather_along into a new tensor of the pieces' joined shape.
tensor gather_pieces(const std::vector<const tensor*>& pieces, shard_layout layout);

}  // namespace ap

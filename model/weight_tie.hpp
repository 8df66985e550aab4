// Tied weights: a Linear that uses an embedding's table, transposed, as its weight (a language model's LM
// head tied to its token embedding, as GPT-2's is).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "model/layer.hpp"

namespace ap {

class sequential;

// Note [tied weights]: "linear:D:V:bias=0:tie=0" is a Linear whose weight (D, V) is the transpose of layer 0's
// embedding table (V, D). The two layers keep a copy each (a pipeline puts them on its first and last stage):
// they start equal (the Linear draws the embedding's table from the embedding's seed), each step their
// gradients are summed, each copy with the other's added, before clipping and the optimizer, and both apply
// the same update from the same optimizer state, element for element, so they stay equal bit for bit. fp32
// addition commutes, so every place gets the same sum: one process (tie_gradients), a stage holding both,
// and two stages whose gradients the coordinator swaps (Note [tied gradients across stages] in
// actors/coordinator.cpp) all train the same model. The copy is left out of the gradient norm (the weight
// counts once).
struct weight_tie {
  std::string owner;  // the embedding's table, "0.weight" (V, D)
  std::string copy;   // the tied Linear's weight, "13.weight" (D, V)
  std::size_t owner_layer = 0, copy_layer = 0;  // their layers' global indices
};

// The ties of the layers of `model` that are tied to another layer (the copy is in `model`; the owner need not
// be, as in a pipeline's last stage). With `whole`, `model` is a whole model (its first index 0): every owner
// must be in it, an embedding earlier than its copy, of the copy's shape transposed; throws
// std::invalid_argument naming both layers otherwise.
std::vector<weight_tie> weight_ties(sequential& model, bool whole = false);

// into += from^T for matrices (their shapes transposed, square ones too), into += from for other tensors of one
// shape; throws std::invalid_argument for any other shapes.
void add_tied(tensor& into, const tensor& from);

// a and b both become a + b (b transposed, as add_tied), in one pass.
void sum_tied(tensor& a, tensor& b);

// Every tie of `ties` whose two weights are both in `params`: both gradients become their sum.
void tie_gradients(const std::vector<parameter>& params, const std::vector<weight_tie>& ties);

// Whether `name` is the copy of a tie: left out of the gradient norm.
bool is_tied_copy(const std::string& name, const std::vector<weight_tie>& ties);

}  // namespace ap

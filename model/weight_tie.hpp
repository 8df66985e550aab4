// Tied weights: a Linear using an embedding's table, transposed, as its weight (GPT-2's LM head).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "model/layer.hpp"

namespace ap {

class sequential;

// Note [tied weights]: "linear:D:V:bias=0:tie=0" is a Linear whose weight (D, V) is layer 0's embedding (V, D)
// transposed. Each keeps a copy (a pipeline's first and last stage); they start equal, and each step both
// gradients become their sum before clipping and the optimizer, so they stay equal bit for bit (Note [tied
// gradients across stages] in actors/coordinator.cpp). The copy is left out of the gradient norm.
struct weight_tie {
  std::string owner;  // the embedding's table, "0.weight" (V, D)
  std::string copy;   // the tied Linear's weight, "13.weight" (D, V)
  std::size_t owner_layer = 0, copy_layer = 0;  // global indices
};

// The ties of `model`'s tied layers (the owner may be elsewhere). With `whole`, every owner must be an earlier
// embedding in `model` of the copy's shape transposed; throws std::invalid_argument naming both otherwise.
std::vector<weight_tie> weight_ties(sequential& model, bool whole = false);

// into += from^T for matrices, into += from for other tensors of one shape; throws std::invalid_argument otherwise.
void add_tied(tensor& into, const tensor& from);

// a and b both become a + b (b transposed), in one pass.
void sum_tied(tensor& a, tensor& b);

// For every tie in `params`: both gradients become their sum.
void tie_gradients(const std::vector<parameter>& params, const std::vector<weight_tie>& ties);

// Whether `name` is the copy of a tie: left out of the gradient norm.
bool is_tied_copy(const std::string& name, const std::vector<weight_tie>& ties);

}  // namespace ap

#include "model/weight_tie.hpp"

#include <stdexcept>

#include "model/sequential.hpp"
#include "tensor/elementwise.hpp"

namespace ap {

std::vector<weight_tie> weight_ties(sequential& model, bool whole) {
  std::vector<weight_tie> ties;
  const std::size_t first = model.first_index();
  for (std::size_t i = 0; i < model.size(); ++i) {
    const layer& copy = model.at(i);
    const auto owner = copy.tied_to();
    if (!owner) continue;
    const std::size_t at = first + i;
    const std::string copy_name = "layer " + std::to_string(at) + " (" + copy.spec() + ")";
    if (*owner >= at) throw std::invalid_argument(copy_name + " is tied to layer " + std::to_string(*owner) + ", which does not come before it");
    ties.push_back({std::to_string(*owner) + ".weight", std::to_string(at) + ".weight", *owner, at});
    if (!whole) continue;
    if (*owner >= model.size()) throw std::invalid_argument(copy_name + " is tied to layer " + std::to_string(*owner) + ", which the model does not have");
    layer& owner_layer = model.at(*owner);
    const std::string owner_name = "layer " + std::to_string(*owner) + " (" + owner_layer.spec() + ")";
    const auto owner_params = owner_layer.parameters("");
    const auto copy_params = model.at(i).parameters("");
    const auto weight_of = [](const std::vector<parameter>& ps) -> const tensor* {
      for (const parameter& p : ps)
        if (p.name == "weight") return p.value;
      return nullptr;
    };
    const tensor* ow = weight_of(owner_params);
    const tensor* cw = weight_of(copy_params);
    if (!ow || !cw || ow->dimension() != 2 || cw->dimension() != 2 || ow->shape()[0] != cw->shape()[1] ||
        ow->shape()[1] != cw->shape()[0])
      throw std::invalid_argument(copy_name + " is tied to " + owner_name +
                                  ": the tied layer's weight must be the transpose of the other's (an embedding's "
                                  "table (V, D) and a Linear D -> V)");
  }
  return ties;
}

namespace {

// Whether `b` is `a` transposed: true for matrices (square ones too), false for other tensors of one shape
// (a step count); throws for any other.
bool transposed_shapes(const tensor& a, const tensor& b) {
  if (a.dimension() != 2 && shape_of(a) == shape_of(b)) return false;
  if (a.dimension() != 2 || b.dimension() != 2 || a.shape()[0] != b.shape()[1] || a.shape()[1] != b.shape()[0])
    throw std::invalid_argument("a tied weight's gradient of shape " + shape_string(b) + " cannot be added to one of shape " +
                                shape_string(a));
  return true;
}

// f(a[i, j], b[j, i]) for every element of a (r, c), in tiles so that both sides are read in cache lines.
template <class B, class F>
void for_transposed_pairs(float* a, B* b, std::size_t r, std::size_t c, const F& f) {
  constexpr std::size_t tile = 32;
  for (std::size_t i0 = 0; i0 < r; i0 += tile)
    for (std::size_t j0 = 0; j0 < c; j0 += tile)
      for (std::size_t i = i0; i < std::min(r, i0 + tile); ++i)
        for (std::size_t j = j0; j < std::min(c, j0 + tile); ++j) f(a[i * c + j], b[j * r + i]);
}

}  // namespace

void add_tied(tensor& into, const tensor& from) {
  if (!transposed_shapes(into, from)) return add_into(into.data(), from.data(), into.size());
  for_transposed_pairs(into.data(), from.data(), into.shape()[0], into.shape()[1], [](float& a, float b) { a += b; });
}

void sum_tied(tensor& a, tensor& b) {
  const bool transposed = transposed_shapes(a, b);
  const auto sum = [](float& x, float& y) { x = y = x + y; };
  float *pa = a.data(), *pb = b.data();
  if (!transposed) {
    for (std::size_t i = 0; i < a.size(); ++i) sum(pa[i], pb[i]);
    return;
  }
  for_transposed_pairs(pa, pb, a.shape()[0], a.shape()[1], sum);
}

void tie_gradients(const std::vector<parameter>& params, const std::vector<weight_tie>& ties) {
  const auto find = [&](const std::string& name) -> const parameter* {
    for (const parameter& p : params)
      if (p.name == name) return &p;
    return nullptr;
  };
  for (const weight_tie& t : ties) {
    const parameter* owner = find(t.owner);
    const parameter* copy = find(t.copy);
    if (!owner || !copy) continue;
    sum_tied(*owner->grad, *copy->grad);
  }
}

bool is_tied_copy(const std::string& name, const std::vector<weight_tie>& ties) {
  for (const weight_tie& t : ties)
    if (t.copy == name) return true;
  return false;
}

}  // namespace ap

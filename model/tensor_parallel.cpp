#include "model/tensor_parallel.hpp"

#include <cstring>
#include <functional>
#include <stdexcept>

#include "collective/shard.hpp"
#include "model/block.hpp"
#include "model/layer_spec.hpp"

namespace ap {

std::vector<std::string> megatron_mlp_specs(const std::vector<std::string>& specs) {
  std::vector<std::string> out = specs;
  long open_column = -1;  // index of a Linear waiting for its row partner
  for (std::size_t i = 0; i < specs.size(); ++i) {
    const layer_spec s = parse_layer_spec(specs[i]);
    if (s.kind == "linear") {
      if (open_column >= 0) {
        out[static_cast<std::size_t>(open_column)] = "column_" + specs[static_cast<std::size_t>(open_column)];
        out[i] = "row_" + specs[i];
        open_column = -1;
      } else {
        open_column = static_cast<long>(i);
      }
    } else if (s.kind != "relu" && s.kind != "gelu" && s.kind != "tanh" && s.kind != "sigmoid") {
      open_column = -1;  // not a pure element-wise map (dropout's mask counts whole units): no pair spans it
    }
  }
  return out;
}

namespace {

void visit(layer& l, const std::function<void(layer&)>& f) {
  f(l);
  if (auto* b = dynamic_cast<block*>(&l))
    for (std::size_t i = 0; i < b->size(); ++i) visit(b->part(i), f);
}

}  // namespace

std::vector<tensor_parallel_layer*> tensor_parallel_layers(sequential& model) {
  std::vector<tensor_parallel_layer*> found;
  for (std::size_t i = 0; i < model.size(); ++i)
    visit(model.at(i), [&](layer& l) {
      if (auto* p = dynamic_cast<tensor_parallel_layer*>(&l)) found.push_back(p);
    });
  return found;
}

std::size_t join_tensor_parallel(sequential& model, const std::shared_ptr<process_group>& group) {
  const auto layers = tensor_parallel_layers(model);
  for (auto* p : layers) p->join_group(group);
  return layers.size();
}

std::map<const tensor*, int> sharded_axes(sequential& model) {
  std::map<const tensor*, int> axes;
  for (auto* p : tensor_parallel_layers(model))
    for (const auto& v : p->sharded_values()) axes[v.value] = v.axis;
  return axes;
}

void gather_along(const std::vector<const tensor*>& pieces, int axis, tensor& whole) {
  const bool columns = axis == 1 && whole.dimension() == 2;
  if (!columns) {  // rows (or a vector's elements): the pieces back to back
    std::size_t offset = 0;
    for (const tensor* p : pieces) {
      if (offset + p->size() > whole.size()) throw std::invalid_argument("gather_along: pieces larger than the whole");
      std::memcpy(whole.data() + offset, p->data(), p->byte_size());
      offset += p->size();
    }
    if (offset != whole.size()) throw std::invalid_argument("gather_along: pieces smaller than the whole");
    return;
  }
  const std::size_t rows = whole.shape()[0], width = whole.shape()[1];
  std::size_t first = 0;
  for (const tensor* p : pieces) {
    const std::size_t w = p->shape()[1];
    for (std::size_t r = 0; r < rows; ++r) std::memcpy(whole.data() + r * width + first, p->data() + r * w, w * sizeof(float));
    first += w;
  }
  if (first != width) throw std::invalid_argument("gather_along: pieces do not cover the columns");
}

tensor piece_along(const tensor& whole, int axis, std::size_t rank, std::size_t ranks) {
  if (!(axis == 1 && whole.dimension() == 2)) {
    const auto [first, last] = shard_rows(whole.shape()[0], ranks, rank);
    return slice_rows(whole, first, last);
  }
  const std::size_t rows = whole.shape()[0], width = whole.shape()[1];
  const auto [first, last] = shard_rows(width, ranks, rank);
  tensor out = tensor::from_shape({rows, last - first});
  for (std::size_t r = 0; r < rows; ++r)
    std::memcpy(out.data() + r * (last - first), whole.data() + r * width + first, (last - first) * sizeof(float));
  return out;
}

}  // namespace ap

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

std::vector<std::string> tensor_parallel_specs(const std::vector<std::string>& specs) {
  return megatron_mlp_specs(specs);
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

std::size_t tensor_parallel_parts(layer& l) {
  std::size_t n = 0;
  visit(l, [&](layer& part) { n += dynamic_cast<tensor_parallel_layer*>(&part) != nullptr; });
  return n;
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

std::map<std::string, int> sharded_axes_by_name(sequential& model) {
  const auto axes = sharded_axes(model);
  std::map<std::string, int> named;
  for (const parameter& p : model.parameters())
    if (auto it = axes.find(p.value); it != axes.end()) named[p.name] = it->second;
  return named;
}

int sharded_axis_of(const std::string& name, const std::map<std::string, int>& axes) {
  if (auto it = axes.find(name); it != axes.end()) return it->second;
  std::size_t best = 0;  // the longest parameter name that `name` extends with "."
  int axis = -1;
  for (const auto& [param, a] : axes)
    if (name.size() > param.size() && name.compare(0, param.size(), param) == 0 && name[param.size()] == '.' &&
        param.size() > best)
      best = param.size(), axis = a;
  return axis;
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

tensor gather_pieces(const std::vector<const tensor*>& pieces, int axis) {
  std::vector<std::size_t> shape = pieces.at(0)->shape();
  const std::size_t along = axis == 1 && shape.size() == 2 ? 1 : 0;
  shape[along] = 0;
  for (const tensor* p : pieces) shape[along] += p->shape()[along];
  tensor whole = tensor::from_shape(shape);
  gather_along(pieces, axis, whole);
  return whole;
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

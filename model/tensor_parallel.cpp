#include "model/tensor_parallel.hpp"

#include <cstring>
#include <functional>
#include <stdexcept>

#include "collective/lone_rank_group.hpp"
#include "collective/shard.hpp"
#include "model/block.hpp"
#include "model/layer_registry.hpp"
#include "model/layer_spec.hpp"
#include "model/sequence_parallel.hpp"

namespace ap {

namespace {

// `spec` as the registered kind `kind` with the same fields or parts ("linear:8:16" -> "column_linear:8:16").
std::string as_kind(const std::string& spec, const layer_spec& parsed, const std::string& kind) {
  return kind + spec.substr(parsed.kind.size());
}

}  // namespace

std::vector<std::string> megatron_mlp_specs(const std::vector<std::string>& specs) {
  std::vector<std::string> out = specs;
  long open_column = -1;  // index of a layer waiting for its row partner
  for (std::size_t i = 0; i < specs.size(); ++i) {
    const layer_spec s = parse_layer_spec(specs[i]);
    const tensor_parallel_traits traits = tensor_parallel_traits_of(s.kind);  // Note [tensor-parallel split]
    if (!traits.column_kind.empty() && !traits.row_kind.empty()) {
      if (open_column >= 0) {
        const std::size_t c = static_cast<std::size_t>(open_column);
        const layer_spec first = parse_layer_spec(specs[c]);
        out[c] = as_kind(specs[c], first, tensor_parallel_traits_of(first.kind).column_kind);
        out[i] = as_kind(specs[i], s, traits.row_kind);
        open_column = -1;
      } else {
        open_column = static_cast<long>(i);
      }
    } else if (!traits.elementwise) {
      open_column = -1;  // no pair spans a non-element-wise layer
    }
  }
  return out;
}

std::vector<std::string> tensor_parallel_specs(const std::vector<std::string>& specs, vocabulary_split vocab) {
  std::vector<std::string> out = megatron_mlp_specs(specs);
  if (vocab.head && !out.empty() && parse_layer_spec(out.back()).kind == "linear")
    out.back() = as_kind(out.back(), parse_layer_spec(out.back()), "column_linear") + ":vocab=1";
  for (std::string& text : out) {
    const layer_spec s = parse_layer_spec(text);
    if (vocab.embeddings && s.kind == "embedding") {
      text = as_kind(text, s, "vocab_embedding");
      continue;
    }
    const tensor_parallel_traits traits = tensor_parallel_traits_of(s.kind);
    if (!traits.split_kind.empty()) {
      text = as_kind(text, s, traits.split_kind);
    } else if (traits.split_parts) {  // a composite: its parts split on their own
      std::string parts;
      for (const std::string& part : tensor_parallel_specs(s.parts)) parts += (parts.empty() ? "" : ",") + part;
      text = s.kind + "[" + parts + "]";
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

std::size_t tensor_parallel_parts(layer& l) {
  std::size_t n = 0;
  visit(l, [&](layer& part) { n += dynamic_cast<tensor_parallel_layer*>(&part) != nullptr; });
  return n;
}

namespace {

// A split layer's spec, or a composite's kind with its split parts; "" when `l` holds none.
std::string split_text(layer& l) {
  if (dynamic_cast<tensor_parallel_layer*>(&l)) return l.spec();
  auto* b = dynamic_cast<block*>(&l);
  if (!b) return "";
  std::string inner;
  for (std::size_t i = 0; i < b->size(); ++i) {
    std::string text = split_text(b->part(i));
    if (text.empty()) continue;
    if (const std::size_t open = text.find(" ("); open != std::string::npos)
      text = text.substr(open + 2, text.size() - open - 3);  // a nested composite: its split parts only
    inner += (inner.empty() ? "" : ", ") + text;
  }
  return inner.empty() ? "" : parse_layer_spec(l.spec()).kind + " (" + inner + ")";
}

}  // namespace

std::string split_layers_text(sequential& model) {
  std::string out;
  std::size_t i = 0;
  while (i < model.size()) {
    const std::string what = split_text(model.at(i));
    std::size_t end = i + 1;
    while (!what.empty() && end < model.size() && model.at(end).spec() == model.at(i).spec()) ++end;
    if (!what.empty())
      out += (out.empty() ? "" : ", ") + std::to_string(model.first_index() + i) +
             (end - i > 1 ? "-" + std::to_string(model.first_index() + end - 1) : "") + " " + what;
    i = end;
  }
  return out;
}

std::size_t join_tensor_parallel(sequential& model, const std::shared_ptr<process_group>& group) {
  const auto layers = tensor_parallel_layers(model);
  for (auto* p : layers) p->join_group(group);
  return layers.size();
}

sequential tensor_parallel_rank(const sequential& model, const std::vector<std::size_t>& chunk_layers, int rank, int T,
                                bool split_vocabulary, bool split_sequence) {
  std::vector<std::string> specs;
  std::size_t begin = 0;
  for (std::size_t n : chunk_layers) {
    if (begin + n > model.size())
      throw std::invalid_argument("tensor_parallel_rank: chunks of " + std::to_string(begin + n) + " layers, the model has " +
                                  std::to_string(model.size()));
    const vocabulary_split vocab{split_vocabulary, split_vocabulary && begin + n == model.size()};
    for (std::string& s : tensor_parallel_specs(model.slice(begin, begin + n).layer_specs(), vocab)) specs.push_back(std::move(s));
    begin += n;
  }
  if (begin != model.size())
    throw std::invalid_argument("tensor_parallel_rank: chunks of " + std::to_string(begin) + " layers, the model has " +
                                std::to_string(model.size()));
  sequential mine = sequential::from_layer_specs(specs, model.first_index());
  mine.set_compute_dtype(model.compute_dtype());
  mine.set_recompute(model.recompute());
  const auto group = std::make_shared<lone_rank_group>("tensor-parallel rank " + std::to_string(rank), rank, T);
  join_tensor_parallel(mine, group);
  if (split_sequence) enable_sequence_parallel(mine, group, chunk_layers);
  return mine;
}

std::map<const tensor*, shard_layout> sharded_layouts(sequential& model) {
  std::map<const tensor*, shard_layout> layouts;
  for (auto* p : tensor_parallel_layers(model))
    for (const auto& v : p->sharded_values()) layouts[v.value] = v.layout;
  return layouts;
}

std::map<std::string, shard_layout> sharded_layouts_by_name(sequential& model) {
  const auto layouts = sharded_layouts(model);
  std::map<std::string, shard_layout> named;
  for (const parameter& p : model.parameters())
    if (auto it = layouts.find(p.value); it != layouts.end()) named[p.name] = it->second;
  return named;
}

namespace {

// `by_name`'s entry for `name`, or for the longest parameter name it extends with "." (optimizer state
// "3.weight.m"); `whole` when none.
template <class Value>
Value named_or_parent(const std::string& name, const std::map<std::string, Value>& by_name, Value whole) {
  if (auto it = by_name.find(name); it != by_name.end()) return it->second;
  std::size_t best = 0;
  Value found = whole;
  for (const auto& [param, v] : by_name)
    if (name.size() > param.size() && name.compare(0, param.size(), param) == 0 && name[param.size()] == '.' &&
        param.size() > best)
      best = param.size(), found = v;
  return found;
}

}  // namespace

shard_layout sharded_layout_of(const std::string& name, const std::map<std::string, shard_layout>& layouts) {
  return named_or_parent(name, layouts, shard_layout{-1});
}

namespace {

// A tensor seen as (outer, length, inner) around the cut axis, the axis made of the layout's blocks.
struct cut_view {
  std::size_t outer, length, inner;
};

cut_view view_of(const tensor& t, int axis) {
  if (t.dimension() == 0) throw std::invalid_argument("a scalar cannot be cut into shards");
  if (axis == 1 && t.dimension() == 2) return {t.shape()[0], t.shape()[1], 1};
  std::size_t inner = 1;
  for (std::size_t i = 1; i < t.dimension(); ++i) inner *= t.shape()[i];
  return {1, t.shape()[0], inner};
}

// One block's run for a piece: the block starts at `start` of the whole's axis, and the piece takes its
// elements [offset, offset + count).
struct chunk {
  std::size_t start, offset, count;
};

// Calls copy(whole element, piece element, elements) for each run of `chunks`.
template <class Copy>
void for_each_chunk(const cut_view& w, const std::vector<chunk>& chunks, Copy copy) {
  std::size_t length = 0;  // the piece's along the axis
  for (const chunk& c : chunks) length += c.count;
  for (std::size_t o = 0; o < w.outer; ++o) {
    std::size_t at = 0;
    for (const chunk& c : chunks) {
      copy((o * w.length + c.start + c.offset) * w.inner, (o * length + at) * w.inner, c.count * w.inner);
      at += c.count;
    }
  }
}

// The blocks' lengths along an axis of `length`; empty when the layout's blocks do not divide it.
std::vector<std::size_t> block_lengths(std::size_t length, const shard_layout& layout) {
  if (!layout.lengths.empty()) {
    std::size_t sum = 0;
    for (std::size_t l : layout.lengths) sum += l;
    return sum == length ? layout.lengths : std::vector<std::size_t>{};
  }
  if (layout.blocks == 0 || length % layout.blocks != 0) return {};
  return std::vector<std::size_t>(layout.blocks, length / layout.blocks);
}

// Rank `rank` of `ranks`'s run of each block, as shard_rows splits it.
std::vector<chunk> chunks_of(const std::vector<std::size_t>& lengths, std::size_t rank, std::size_t ranks) {
  std::vector<chunk> chunks;
  std::size_t start = 0;
  for (std::size_t l : lengths) {
    const auto [first, last] = shard_rows(l, ranks, rank);
    chunks.push_back({start, first, last - first});
    start += l;
  }
  return chunks;
}

std::string layout_text(const shard_layout& layout) {
  std::string blocks = std::to_string(layout.blocks);
  if (!layout.lengths.empty()) {
    blocks.clear();
    for (std::size_t l : layout.lengths) blocks += (blocks.empty() ? "" : "+") + std::to_string(l);
  }
  return std::string(layout.axis == 1 ? "columns" : "rows") + (layout.blocks == 1 ? "" : " in " + blocks + " blocks");
}

}  // namespace

void gather_along(const std::vector<const tensor*>& pieces, shard_layout layout, tensor& whole) {
  const cut_view w = view_of(whole, layout.axis);
  const auto bad = [&](const std::string& why) {
    return std::invalid_argument("gather_along (" + layout_text(layout) + "): " + why + ", whole " + shape_string(whole));
  };
  const std::vector<std::size_t> lengths = block_lengths(w.length, layout);
  if (lengths.empty()) throw bad("the blocks do not divide the axis");
  const std::size_t blocks = lengths.size();
  std::size_t offset = 0;  // equal blocks: each piece's share of every block
  for (std::size_t r = 0; r < pieces.size(); ++r) {
    const tensor* p = pieces[r];
    const cut_view v = view_of(*p, layout.axis);
    if (v.outer != w.outer || v.inner != w.inner || (layout.lengths.empty() && v.length % blocks != 0))
      throw bad("a piece " + shape_string(*p) + " does not fit");
    std::vector<chunk> chunks;
    if (layout.lengths.empty()) {
      const std::size_t count = v.length / blocks;
      if (offset + count > w.length / blocks) throw bad("pieces larger than the whole");
      for (std::size_t b = 0; b < blocks; ++b) chunks.push_back({b * lengths[b], offset, count});
      offset += count;
    } else {  // unequal blocks: each split over the pieces as shard_rows splits it
      chunks = chunks_of(lengths, r, pieces.size());
      std::size_t length = 0;
      for (const chunk& c : chunks) length += c.count;
      if (v.length != length) throw bad("a piece " + shape_string(*p) + " does not fit");
    }
    for_each_chunk(w, chunks, [&](std::size_t at, std::size_t from, std::size_t n) {
      std::memcpy(whole.data() + at, p->data() + from, n * sizeof(float));
    });
  }
  // Unequal blocks: sizes were checked against the shares, which cover the whole.
  if (pieces.empty() || (layout.lengths.empty() && offset != w.length / blocks)) throw bad("pieces smaller than the whole");
}

tensor gather_pieces(const std::vector<const tensor*>& pieces, shard_layout layout) {
  std::vector<std::size_t> shape = pieces.at(0)->shape();
  const std::size_t along = layout.axis == 1 && shape.size() == 2 ? 1 : 0;
  shape[along] = 0;
  for (const tensor* p : pieces) shape[along] += p->shape()[along];
  tensor whole = tensor::from_shape(shape);
  gather_along(pieces, layout, whole);
  return whole;
}

tensor piece_along(const tensor& whole, shard_layout layout, std::size_t rank, std::size_t ranks) {
  const cut_view w = view_of(whole, layout.axis);
  const std::vector<std::size_t> lengths = block_lengths(w.length, layout);
  if (lengths.empty())
    throw std::invalid_argument("piece_along (" + layout_text(layout) + "): the blocks do not divide the axis of " +
                                shape_string(whole));
  const std::vector<chunk> chunks = chunks_of(lengths, rank, ranks);
  std::size_t length = 0;
  for (const chunk& c : chunks) length += c.count;
  std::vector<std::size_t> shape = whole.shape();
  shape[layout.axis == 1 && shape.size() == 2 ? 1 : 0] = length;
  tensor piece = tensor::from_shape(shape);
  for_each_chunk(w, chunks, [&](std::size_t from, std::size_t at, std::size_t n) {
    std::memcpy(piece.data() + at, whole.data() + from, n * sizeof(float));
  });
  return piece;
}

}  // namespace ap

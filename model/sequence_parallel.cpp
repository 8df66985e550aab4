#include "model/sequence_parallel.hpp"

#include <cstring>
#include <functional>
#include <optional>
#include <stdexcept>

#include "model/block.hpp"
#include "model/layer_registry.hpp"
#include "model/layer_spec.hpp"
#include "model/parallel_attention.hpp"
#include "model/parallel_linear.hpp"
#include "model/parallel_swiglu.hpp"
#include "model/tensor_parallel.hpp"

namespace ap {

shape_t sequence_shard_shape(const shape_t& whole, std::size_t ranks, const std::string& who) {
  if (whole.size() < 2)
    throw std::invalid_argument(who + ": sequence parallelism divides rows, got a tensor of shape " +
                                shape_string(whole));
  const std::size_t axis = whole.size() >= 3 ? 1 : 0;
  if (whole[axis] % ranks != 0)
    throw std::invalid_argument(who + ": sequence parallelism over " + std::to_string(ranks) +
                                " tensor-parallel ranks needs " + std::to_string(ranks) + " to divide the " +
                                (axis == 1 ? "sequence length" : "rows") + ", got input of shape " + shape_string(whole));
  shape_t shard = whole;
  shard[axis] /= ranks;
  return shard;
}

shape_t sequence_whole_shape(const shape_t& shard, std::size_t ranks) {
  shape_t whole = shard;
  whole[whole.size() >= 3 ? 1 : 0] *= ranks;
  return whole;
}

tensor sequence_shard(const tensor& whole, const process_group& group, const std::string& who) {
  const auto T = static_cast<std::size_t>(group.size());
  tensor shard = tensor::from_shape(sequence_shard_shape(whole.shape(), T, who));
  std::memcpy(shard.data(), whole.data() + static_cast<std::size_t>(group.rank()) * shard.size(),
              shard.size() * sizeof(float));
  return shard;
}

tensor sequence_gather(const tensor& shard, process_group& group) {
  tensor whole;
  group.all_gather(shard, whole).wait();  // stacked along the first axis: the rows in order
  whole.reshape(sequence_whole_shape(shard.shape(), static_cast<std::size_t>(group.size())));
  return whole;
}

collective_handle start_sequence_reduce_scatter(tensor& whole, tensor& shard, process_group& group) {
  const std::size_t width = whole.shape().back();
  whole.reshape({whole.size() / width, width});
  return group.reduce_scatter(whole, shard);
}

namespace {

// Where a part leaves the rows: each rank's rows, whole width (`rows`), or every row with the rank's columns
// (`columns`, between a column layer and its row layer).
enum class held { rows, columns };

// The layout after `spec` given the one before, or nothing when it cannot run so; `split` counts split layers.
std::optional<held> through(const layer_spec& s, held in, std::size_t& split) {
  if (s.kind == "block" || s.kind == "residual") {
    held at = in;
    for (const std::string& part : s.parts) {
      const auto next = through(parse_layer_spec(part), at, split);
      if (!next) return std::nullopt;
      at = *next;
    }
    if (s.kind == "residual" && (in != held::rows || at != held::rows)) return std::nullopt;
    return at;
  }
  if (s.kind == "layernorm" || s.kind == "rmsnorm") return in == held::rows ? std::optional<held>(in) : std::nullopt;
  if (s.kind == "head_parallel_attention" || s.kind == "parallel_swiglu_mlp") {
    ++split;
    return in == held::rows ? std::optional<held>(held::rows) : std::nullopt;
  }
  if (s.kind == "column_linear") {
    if (in != held::rows || s.option("vocab")) return std::nullopt;
    ++split;
    return held::columns;
  }
  if (s.kind == "row_linear") {
    if (in != held::columns) return std::nullopt;
    ++split;
    return held::rows;
  }
  if (tensor_parallel_traits_of(s.kind).elementwise) return in;
  return std::nullopt;
}

}  // namespace

bool runs_on_sequence_shards(const std::string& spec) {
  const layer_spec s = parse_layer_spec(spec);
  if (s.kind != "block" && s.kind != "residual") return false;
  std::size_t split = 0;
  const auto out = through(s, held::rows, split);
  return out && *out == held::rows && split > 0;
}

std::size_t sequence_shard_blocks(const std::vector<std::string>& specs) {
  std::size_t n = 0;
  for (const std::string& s : specs) n += runs_on_sequence_shards(s);
  return n;
}

void check_sequence_parallel(const std::vector<std::string>& specs, int tensor_parallel) {
  if (tensor_parallel < 2)
    throw std::invalid_argument("--sequence-parallel divides rows over the tensor-parallel ranks: it needs "
                                "--tensor-parallel 2 or more, got " + std::to_string(tensor_parallel));
  if (sequence_shard_blocks(tensor_parallel_specs(specs)) == 0)
    throw std::invalid_argument("--sequence-parallel: no layer of the model is a block whose parts all run on rows "
                                "(norms, activations, split Linear pairs, attention, SwiGLU; no dropout), so there "
                                "is nothing to divide");
}

namespace {

void visit(layer& l, const std::function<void(layer&)>& f) {
  f(l);
  if (auto* b = dynamic_cast<block*>(&l))
    for (std::size_t i = 0; i < b->size(); ++i) visit(b->part(i), f);
}

// The split layers of `b` on rows.
void divide(block& b) {
  visit(b, [&](layer& l) {
    if (auto* c = dynamic_cast<column_parallel_linear*>(&l)) c->set_sequence_parallel(true);
    if (auto* r = dynamic_cast<row_parallel_linear*>(&l)) r->set_sequence_parallel(true);
    if (auto* a = dynamic_cast<head_parallel_attention*>(&l)) a->set_sequence_parallel(true);
    if (auto* m = dynamic_cast<parallel_swiglu_mlp*>(&l)) m->set_sequence_parallel(true);
  });
}

}  // namespace

std::size_t enable_sequence_parallel(sequential& model, const std::shared_ptr<process_group>& group,
                                     const std::vector<std::size_t>& chunk_layers) {
  if (!group || group->size() == 1) return 0;
  std::vector<bool> chunk_start(model.size() + 1, false);
  for (std::size_t at = 0, c = 0; c < chunk_layers.size() && at < model.size(); at += chunk_layers[c++])
    chunk_start[at] = true;
  std::size_t divided = 0;
  for (std::size_t i = 0; i < model.size();) {
    if (!runs_on_sequence_shards(model.at(i).spec())) {
      ++i;
      continue;
    }
    std::size_t end = i + 1;
    while (end < model.size() && !chunk_start[end] && runs_on_sequence_shards(model.at(end).spec())) ++end;
    for (std::size_t j = i; j < end; ++j) {
      auto& b = dynamic_cast<block&>(model.at(j));
      divide(b);
      b.set_sequence_split({group, j == i, j + 1 == end});
    }
    divided += end - i;
    i = end;
  }
  return divided;
}

}  // namespace ap

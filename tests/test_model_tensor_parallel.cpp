// Tensor-parallel layers (model/parallel_linear.hpp, model/parallel_attention.hpp, model/parallel_swiglu.hpp): the
// Megatron MLP, attention with its heads split (grouped-query and rotary too), the SwiGLU MLP, and a whole GPT block
// (LLaMA-style too) over T ranks (threads of one local_group) give the unsplit
// model's output, dx and gradient slices, with exactly one all-reduce forward and one backward per MLP pair
// or attention (two each way per block); unsplit they are Linear and attention, bit for bit.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <map>
#include <thread>

#include "collective/local_group.hpp"
#include "collective/shard.hpp"
#include "gradient_check.hpp"
#include "model/attention.hpp"
#include "model/gpt_spec.hpp"
#include "model/linear.hpp"
#include "model/parallel_attention.hpp"
#include "model/parallel_linear.hpp"
#include "model/parallel_swiglu.hpp"
#include "model/sequential.hpp"
#include "model/tensor_parallel.hpp"
#include "test_support.hpp"

using namespace ap;
using namespace ap::test;

namespace {

// A real group member observed: `on_all_reduce` runs when an all-reduce starts (counting them), and
// `before_wait` when any of its collectives is waited on (what had been computed by then). Either may be empty.
class observed_group final : public process_group {
 public:
  observed_group(std::unique_ptr<process_group> inner, std::function<void()> on_all_reduce,
                 std::function<void()> before_wait)
      : inner_(std::move(inner)), on_all_reduce_(std::move(on_all_reduce)), before_wait_(std::move(before_wait)) {}
  const std::string& name() const override { return inner_->name(); }
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  collective_handle all_reduce(tensor& t, reduce_op op) override {
    if (on_all_reduce_) on_all_reduce_();
    return probed(inner_->all_reduce(t, op));
  }
  collective_handle reduce_scatter(const tensor& in, tensor& out, reduce_op op) override {
    return probed(inner_->reduce_scatter(in, out, op));
  }
  collective_handle all_gather(const tensor& in, tensor& out) override { return probed(inner_->all_gather(in, out)); }
  collective_handle broadcast(tensor& t, int root) override { return probed(inner_->broadcast(t, root)); }
  void abort(const std::string& reason) override { inner_->abort(reason); }

 private:
  struct probed_state final : collective_handle::state {
    collective_handle inner;
    std::function<void()> before_wait;
    void wait() override {
      before_wait();
      inner.wait();
    }
    bool ready() const override { return inner.ready(); }
  };
  collective_handle probed(collective_handle h) {
    if (!before_wait_) return h;
    auto st = std::make_shared<probed_state>();
    st->inner = std::move(h);
    st->before_wait = before_wait_;
    return collective_handle(st);
  }
  std::unique_ptr<process_group> inner_;
  std::function<void()> on_all_reduce_, before_wait_;
};

// Columns [first, last) of a (rows, cols) tensor, or elements of a vector.
tensor column_slice(const tensor& m, std::size_t first, std::size_t last) {
  const bool vector = m.dimension() == 1;
  const std::size_t r = vector ? 1 : m.shape()[0], c = m.shape().back();
  tensor out = tensor::from_shape(vector ? shape_t{last - first} : shape_t{r, last - first});
  for (std::size_t i = 0; i < r; ++i)
    for (std::size_t j = first; j < last; ++j) out.data()[i * (last - first) + j - first] = m.data()[i * c + j];
  return out;
}

struct rank_result {
  tensor y, dx;
  std::vector<tensor> grads;           // every parameter's gradient, in parameters() order
  std::vector<tensor> values;          // every parameter's value, the same order
  std::vector<shard_layout> layouts;   // how each is cut (axis -1: whole on every rank)
  int forward_all_reduces = 0, backward_all_reduces = 0;  // this rank's
};

// One forward and backward of `model`, layer by layer: its output, its input gradient and every gradient.
// With `split_iw`, every layer's backward_input runs first (top down), then every backward_weight (Note
// [backward split]), as a zero-bubble schedule runs them. `all_reduces` counts this rank's (null: none).
rank_result forward_backward(sequential& model, const tensor& x, const tensor& dy, bool split_iw = false,
                             const std::atomic<int>* all_reduces = nullptr) {
  const auto count = [&] { return all_reduces ? all_reduces->load() : 0; };
  std::vector<layer_cache> caches(model.size());
  rank_result out;
  const int before = count();
  out.y = x;
  for (std::size_t i = 0; i < model.size(); ++i) out.y = model.at(i).forward(out.y, caches[i], {});
  out.forward_all_reduces = count() - before;
  std::vector<tensor> dys(model.size());  // each layer's dy, for the later backward_weight
  out.dx = dy;
  for (std::size_t i = model.size(); i-- > 0;) {
    tensor below;
    if (split_iw) {
      dys[i] = out.dx;
      model.at(i).backward_input(out.dx, caches[i], &below);
    } else {
      model.at(i).backward(out.dx, caches[i], &below);
    }
    out.dx = std::move(below);
  }
  if (split_iw)
    for (std::size_t i = 0; i < model.size(); ++i) model.at(i).backward_weight(dys[i], caches[i]);
  out.backward_all_reduces = count() - before - out.forward_all_reduces;
  const auto layouts = sharded_layouts(model);
  for (std::size_t i = 0; i < model.size(); ++i)
    for (parameter& p : model.at(i).parameters("")) {
      out.grads.push_back(*p.grad);
      out.values.push_back(*p.value);
      const auto it = layouts.find(p.value);
      out.layouts.push_back(it == layouts.end() ? shard_layout{-1} : it->second);
    }
  return out;
}

// Forward and backward of the model `specs` split over `ranks` threads, each rank counting its own
// all-reduces (one counter per rank: the ranks run at once).
std::vector<rank_result> run_split(const std::vector<std::string>& specs, int ranks, const tensor& x,
                                   const tensor& dy, bool split_iw = false) {
  local_group group("tp", ranks);
  std::vector<rank_result> results(static_cast<std::size_t>(ranks));
  std::vector<std::atomic<int>> counters(static_cast<std::size_t>(ranks));
  std::vector<std::thread> threads;
  std::vector<std::string> errors(static_cast<std::size_t>(ranks));
  for (int r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      const auto i = static_cast<std::size_t>(r);
      try {
        sequential model = sequential::from_layer_specs(specs);
        join_tensor_parallel(model, std::make_shared<observed_group>(group.member(r), [&c = counters[i]] { ++c; },
                                                                     nullptr));
        model.initialize(7);  // after joining: each rank's slice of the unsplit initialisation
        results[i] = forward_backward(model, x, dy, split_iw, &counters[i]);
      } catch (const std::exception& e) {
        errors[i] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  for (auto& e : errors) REQUIRE_MESSAGE(e.empty(), e);
  return results;
}

rank_result run_whole(const std::vector<std::string>& specs, const tensor& x, const tensor& dy) {
  sequential model = sequential::from_layer_specs(specs);
  model.initialize(7);
  return forward_backward(model, x, dy);
}

// The split run equals the whole one: every rank's output and dx, and every parameter value (exactly: the
// shards are slices of the unsplit initialisation) and gradient, gathered from the ranks' shards.
void check_split_equals_whole(const std::vector<rank_result>& got, const rank_result& expected) {
  for (std::size_t r = 0; r < got.size(); ++r) {
    CAPTURE(r);
    CHECK(got[r].y.shape() == expected.y.shape());
    CHECK(check_close(got[r].y, expected.y, 1e-5, 1e-5, "y"));
    CHECK(check_close(got[r].dx, expected.dx, 1e-5, 1e-5, "dx"));
  }
  REQUIRE(got[0].grads.size() == expected.grads.size());
  for (std::size_t k = 0; k < expected.grads.size(); ++k) {
    CAPTURE(k);
    const shard_layout layout = got[0].layouts[k];
    std::vector<const tensor*> values, grads;
    for (const rank_result& g : got) values.push_back(&g.values[k]), grads.push_back(&g.grads[k]);
    if (layout.axis < 0) {  // whole on every rank
      for (const rank_result& g : got) {
        CHECK(check_close(g.values[k], expected.values[k], 0.0, 0.0, "whole value"));
        CHECK(check_close(g.grads[k], expected.grads[k], 1e-5, 1e-5, "whole gradient"));
      }
      continue;
    }
    CHECK(check_close(gather_pieces(values, layout), expected.values[k], 0.0, 0.0, "gathered value"));
    CHECK(check_close(gather_pieces(grads, layout), expected.grads[k], 1e-5, 1e-5, "gathered gradient"));
  }
}

// A LLaMA-style block's config: grouped-query attention with rotary positions, the SwiGLU MLP, RMSNorm, biases on.
const char* const llama_block_spec = "gpt:dim=16,heads=4,kv_heads=2,pos=rope,act=swiglu,norm=rms,mlp=24";

// How many of `model`'s parameters have a gradient with a nonzero element.
int nonzero_gradients(sequential& model) {
  int n = 0;
  for (std::size_t i = 0; i < model.size(); ++i)
    for (parameter& p : model.at(i).parameters("")) {
      const float* g = p.grad->data();
      n += std::any_of(g, g + p.grad->size(), [](float v) { return v != 0.0f; }) ? 1 : 0;
    }
  return n;
}

}  // namespace

TEST_CASE("unsplit, the parallel layers are Linear bit for bit (same initialisation, same gradients)") {
  const tensor x = random_tensor({5, 8}, 1), dy = random_tensor({5, 6}, 2);
  for (const char* kind : {"column_linear:8:6", "row_linear:8:6"}) {
    auto parallel = make_layer(kind);
    linear plain(8, 6);
    parallel->initialize(3);
    plain.initialize(3);
    layer_cache c1, c2;
    const tensor y1 = parallel->forward(x, c1, {}), y2 = plain.forward(x, c2, {});
    CHECK(std::vector<float>(y1.begin(), y1.end()) == std::vector<float>(y2.begin(), y2.end()));
    const tensor dx1 = parallel->backward(dy, c1), dx2 = plain.backward(dy, c2);
    CHECK(std::vector<float>(dx1.begin(), dx1.end()) == std::vector<float>(dx2.begin(), dx2.end()));
    CHECK(parallel->spec() == kind);
    check_layer_gradients(*parallel, x, {});
  }
}

TEST_CASE("the Megatron MLP (column -> GELU -> row) over T ranks equals the unsplit MLP, with one all-reduce each way") {
  const std::vector<std::string> whole = {"linear:8:16", "gelu", "linear:16:8"};
  const std::vector<std::string> split = {"column_linear:8:16", "gelu", "row_linear:16:8"};
  const tensor x = random_tensor({2, 3, 8}, 11), dy = random_tensor({2, 3, 8}, 12);  // (batch, seq, features)
  const rank_result expected = run_whole(whole, x, dy);
  for (int ranks : {1, 2, 4}) {
    CAPTURE(ranks);
    const auto got = run_split(split, ranks, x, dy);
    for (int r = 0; r < ranks; ++r) {
      const rank_result& g = got[static_cast<std::size_t>(r)];
      CHECK(g.forward_all_reduces == 1);   // the row layer's partial outputs
      CHECK(g.backward_all_reduces == 1);  // the column layer's partial dx
      CHECK(g.y.shape() == expected.y.shape());
      CHECK(check_close(g.y, expected.y, 1e-5, 1e-5, "y"));
      CHECK(check_close(g.dx, expected.dx, 1e-5, 1e-5, "dx"));
      const auto [c0, c1] = shard_rows(16, static_cast<std::size_t>(ranks), static_cast<std::size_t>(r));
      CHECK(check_close(g.grads[0], column_slice(expected.grads[0], c0, c1), 1e-5, 1e-5, "column dweight"));
      CHECK(check_close(g.grads[1], column_slice(expected.grads[1], c0, c1), 1e-5, 1e-5, "column dbias"));
      CHECK(check_close(g.grads[2], slice_rows(expected.grads[2], c0, c1), 1e-5, 1e-5, "row dweight"));
      CHECK(check_close(g.grads[3], expected.grads[3], 1e-5, 1e-5, "row dbias (whole on every rank)"));
    }
  }
}

TEST_CASE("split over 2 ranks, forward_owned gives forward's bits and the parallel Linears keep the given input as the stash") {
  // Note [owned input] in model/layer.hpp: a block gives each part after its first the activation before it.
  const std::vector<std::pair<std::string, shape_t>> cases = {
      {"column_linear:8:16", {6, 8}}, {"row_linear:16:8", {6, 16}}, {"head_parallel_attention:16:4", {2, 4, 16}},
      {"head_parallel_attention:16:4:kv_heads=2:rope=10000", {2, 4, 16}}, {"parallel_swiglu_mlp:8:16", {6, 8}}};
  for (const auto& [spec, shape] : cases) {
    CAPTURE(spec);
    local_group group("tp", 2);
    std::vector<std::string> errors(2);
    std::vector<std::thread> ranks;
    for (int r = 0; r < 2; ++r)
      ranks.emplace_back([&, r] {
        try {
          sequential model = sequential::from_layer_specs({spec});
          join_tensor_parallel(model, std::shared_ptr<process_group>(group.member(r)));
          model.initialize(41);
          layer& l = model.at(0);
          const auto gradients = [&] {
            std::vector<tensor> g;
            for (parameter& p : l.parameters("")) g.push_back(*p.grad), p.grad->fill(0.0f);
            return g;
          };
          const tensor x = random_tensor(shape, 42);  // a row layer takes this rank's shard: its columns
          const tensor xr = spec.rfind("row_", 0) == 0 ? column_slice(x, std::size_t(r) * 8, std::size_t(r) * 8 + 8) : x;
          const std::string rank = "rank " + std::to_string(r) + ": ";
          layer_cache kept, given;
          const tensor y = l.forward(xr, kept, {});
          const tensor dy = random_tensor(shape_of(y), 43);
          const tensor dx = l.backward(dy, kept);
          const auto expected = gradients();
          tensor x_given = xr;
          const float* buffer = x_given.data();
          if (!(l.forward_owned(std::move(x_given), given, {}) == y)) throw std::runtime_error(rank + "y differs");
          const float* stash = nullptr;
          if (auto* c = dynamic_cast<const column_parallel_linear*>(&l)) stash = given.get<column_parallel_linear::saved>(*c).x.data();
          if (auto* w = dynamic_cast<const row_parallel_linear*>(&l)) stash = given.get<row_parallel_linear::saved>(*w).x.data();
          if (stash && stash != buffer) throw std::runtime_error(rank + "the stash is a copy");
          if (!(l.backward(dy, given) == dx)) throw std::runtime_error(rank + "dx differs");
          const auto got = gradients();
          for (std::size_t i = 0; i < got.size(); ++i)
            if (!(got[i] == expected[i])) throw std::runtime_error(rank + "gradient " + std::to_string(i) + " differs");
        } catch (const std::exception& e) {
          errors[std::size_t(r)] = e.what();
        }
      });
    for (auto& t : ranks) t.join();
    for (const auto& e : errors) CHECK_MESSAGE(e.empty(), e);
  }
}

TEST_CASE("a width the group does not divide, or joining twice, is refused naming the layer and the group") {
  local_group group("tp stage 0", 3);
  auto column = make_layer("column_linear:8:16");
  auto* p = dynamic_cast<tensor_parallel_layer*>(column.get());
  REQUIRE(p);
  CHECK_THROWS_WITH_AS(p->join_group(group.member(0)),
                       "ColumnParallelLinear(8->16) cannot split its 16 output columns over 3 tensor-parallel ranks "
                       "of group 'tp stage 0': 3 does not divide 16",
                       std::invalid_argument);
  local_group pair("tp", 2);
  auto row = make_layer("row_linear:16:8");
  auto* q = dynamic_cast<tensor_parallel_layer*>(row.get());
  q->join_group(pair.member(1));
  CHECK(row->describe() == "RowParallelLinear(16->8) rank 1 of 2");
  CHECK_THROWS_AS(q->join_group(pair.member(1)), std::logic_error);
  layer_cache cache;
  CHECK_THROWS_WITH_AS(row->forward(random_tensor({2, 16}, 1), cache, {}),
                       "RowParallelLinear(16->8) rank 1 of 2 takes 8 features (its shard of 16), got input of shape (2, 16)",
                       std::invalid_argument);
}

TEST_CASE("unsplit, head-parallel attention is attention bit for bit (same initialisation, names, gradients)") {
  const tensor x = random_tensor({2, 8, 16}, 1), dy = random_tensor({2, 8, 16}, 2);  // (batch, sequence, dim)
  auto parallel = make_layer("head_parallel_attention:16:4");
  causal_self_attention plain(16, 4);
  parallel->initialize(3);
  plain.initialize(3);
  layer_cache c1, c2;
  const tensor y1 = parallel->forward(x, c1, {}), y2 = plain.forward(x, c2, {});
  CHECK(std::vector<float>(y1.begin(), y1.end()) == std::vector<float>(y2.begin(), y2.end()));
  const tensor dx1 = parallel->backward(dy, c1), dx2 = plain.backward(dy, c2);
  CHECK(std::vector<float>(dx1.begin(), dx1.end()) == std::vector<float>(dx2.begin(), dx2.end()));
  const auto p1 = parallel->parameters("0."), p2 = plain.parameters("0.");
  REQUIRE(p1.size() == p2.size());
  for (std::size_t k = 0; k < p1.size(); ++k) {
    CHECK(p1[k].name == p2[k].name);
    CHECK(check_close(*p1[k].value, *p2[k].value, 0.0, 0.0, p1[k].name));
    CHECK(check_close(*p1[k].grad, *p2[k].grad, 0.0, 0.0, p1[k].name + " grad"));
  }
  CHECK(parallel->spec() == "head_parallel_attention:16:4");
  check_layer_gradients(*parallel, random_tensor({1, 4, 16}, 4, 0.5f), {});
}

TEST_CASE("attention with its heads split over T ranks equals the unsplit layer, one all-reduce each way, I/W split too") {
  const tensor x = random_tensor({2, 8, 16}, 21), dy = random_tensor({2, 8, 16}, 22);
  const rank_result expected = run_whole({"attention:16:4"}, x, dy);
  for (int ranks : {1, 2, 4})
    for (bool split_iw : {false, true}) {
      CAPTURE(ranks);
      CAPTURE(split_iw);
      const auto got = run_split({"head_parallel_attention:16:4"}, ranks, x, dy, split_iw);
      for (const rank_result& g : got) {
        CHECK(g.forward_all_reduces == 1);   // the output projection's partial products
        CHECK(g.backward_all_reduces == 1);  // the QKV projection's partial dx
      }
      check_split_equals_whole(got, expected);
    }
}

TEST_CASE("a GPT block over T ranks equals the unsplit block with exactly 2 all-reduces forward and 2 backward") {
  const std::vector<std::string> whole = {gpt_block_spec(16, 4)};
  const std::vector<std::string> split = tensor_parallel_specs(whole);
  CHECK(split == std::vector<std::string>{"block[residual[layernorm:16,head_parallel_attention:16:4],residual["
                                          "layernorm:16,column_linear:16:64,gelu,row_linear:64:16]]"});
  const tensor x = random_tensor({2, 8, 16}, 31), dy = random_tensor({2, 8, 16}, 32);
  const rank_result expected = run_whole(whole, x, dy);
  for (int ranks : {2, 4})
    for (bool split_iw : {false, true}) {
      CAPTURE(ranks);
      CAPTURE(split_iw);
      const auto got = run_split(split, ranks, x, dy, split_iw);
      for (const rank_result& g : got) {
        CHECK(g.forward_all_reduces == 2);   // attention's output projection, the MLP's row layer
        CHECK(g.backward_all_reduces == 2);  // attention's QKV dx, the MLP's column layer's dx
      }
      check_split_equals_whole(got, expected);
    }
}

TEST_CASE("a GPT-2-shaped model of vocabulary 1000 over 2 ranks equals one process: biases on and off, LayerNorm and RMSNorm") {
  // Note [GPT-2 initialisation] in model/gpt_spec.hpp: the std options travel in the split layers' texts, so each
  // rank's shard is its slice of the unsplit weights (checked exactly by check_split_equals_whole).
  tensor ids = tensor::from_shape({2, 8});
  for (std::size_t i = 0; i < ids.size(); ++i) ids.data()[i] = float((i * 137 + 11) % 1000);
  const tensor dy = random_tensor({2, 8, 1000}, 33, 0.01f);
  for (const char* spec : {"gpt2-tiny:layers=2,dim=16,heads=4,context=8,vocab=1000",
                           "gpt2-tiny:layers=1,dim=16,heads=4,context=8,vocab=1000,bias=0,norm=rms,gelu=exact,mlp=24"}) {
    CAPTURE(spec);
    const std::vector<std::string> whole = gpt_layer_specs(parse_gpt_spec(spec));
    const std::vector<std::string> split = tensor_parallel_specs(whole);
    CHECK(split[2].find("head_parallel_attention:16:4:std=0.02:proj_std=") != std::string::npos);
    CHECK(split[2].find("row_linear:") != std::string::npos);
    check_split_equals_whole(run_split(split, 2, ids, dy), run_whole(whole, ids, dy));
  }
}

TEST_CASE("the fused QKV weight is cut per head in q, k and v alike, and gathers back to the unsplit tensor") {
  causal_self_attention whole(16, 4);  // head width 4: q at columns 0-15, k at 16-31, v at 32-47
  whole.initialize(5);
  const tensor& w = *whole.parameters("").at(0).value;  // (16, 48)
  const tensor& b = *whole.parameters("").at(1).value;  // (48)
  for (std::size_t ranks : {2u, 4u}) {
    CAPTURE(ranks);
    local_group group("tp", static_cast<int>(ranks));
    std::vector<head_parallel_attention> shards(ranks, head_parallel_attention(16, 4));
    std::vector<const tensor*> weights, biases;
    for (std::size_t r = 0; r < ranks; ++r) {
      shards[r].join_group(group.member(static_cast<int>(r)));
      shards[r].initialize(5);
      const auto values = shards[r].sharded_values();
      REQUIRE(values.size() == 3);  // qkv weight and bias, proj weight (its bias is whole)
      CHECK(values[0].layout == shard_layout{1, 3});
      CHECK(values[1].layout == shard_layout{0, 3});
      CHECK(values[2].layout == shard_layout{0, 1});
      weights.push_back(values[0].value);
      biases.push_back(values[1].value);
      CHECK(check_close(*values[0].value, piece_along(w, values[0].layout, r, ranks), 0.0, 0.0, "piece of qkv.weight"));
      CHECK(check_close(*values[1].value, piece_along(b, values[1].layout, r, ranks), 0.0, 0.0, "piece of qkv.bias"));
    }
    // Rank 1's first column is q of its first head, its first k column is k of the same head.
    const std::size_t width = 16 / ranks, first = width;  // rank 1's heads start at column `width` of q
    const tensor& piece = *weights[1];
    REQUIRE(piece.shape() == shape_t{16, 3 * width});
    for (std::size_t i = 0; i < 16; ++i) {
      CHECK(piece.data()[i * 3 * width] == w.data()[i * 48 + first]);
      CHECK(piece.data()[i * 3 * width + width] == w.data()[i * 48 + 16 + first]);
      CHECK(piece.data()[i * 3 * width + 2 * width] == w.data()[i * 48 + 32 + first]);
    }
    CHECK(check_close(gather_pieces(weights, {1, 3}), w, 0.0, 0.0, "gathered qkv.weight"));
    CHECK(check_close(gather_pieces(biases, {0, 3}), b, 0.0, 0.0, "gathered qkv.bias"));
    const std::vector<const tensor*> missing(weights.begin(), weights.end() - 1);
    tensor target = w;
    CHECK_THROWS_AS(gather_along(missing, {1, 3}, target), std::invalid_argument);
  }
}

TEST_CASE("attention refuses a T that does not divide its heads, naming the layer, the heads and T") {
  local_group group("tp stage 0", 3);
  auto attention = make_layer("head_parallel_attention:12:4");  // 3 divides dim 12, not the 4 heads
  auto* p = dynamic_cast<tensor_parallel_layer*>(attention.get());
  REQUIRE(p);
  CHECK_THROWS_WITH_AS(p->join_group(group.member(0)),
                       "HeadParallelAttention(12, 4 heads) cannot split its 4 heads over 3 tensor-parallel ranks "
                       "of group 'tp stage 0': 3 does not divide 4",
                       std::invalid_argument);
  CHECK(attention->describe() == "HeadParallelAttention(12, 4 heads)");  // unchanged: nothing was cut
  local_group pair("tp", 2);
  p->join_group(pair.member(1));
  CHECK(attention->describe() == "HeadParallelAttention(12, 4 heads) rank 1 of 2");
  sequential model = sequential::from_layer_specs({"head_parallel_attention:16:4"});
  local_group two("tp", 2);
  join_tensor_parallel(model, two.member(0));
  CHECK(sharded_layouts_by_name(model).at("0.qkv.weight") == shard_layout{1, 3});
  CHECK(sharded_layout_of("0.qkv.bias.m", sharded_layouts_by_name(model)) == shard_layout{0, 3});
  CHECK(sharded_layout_of("0.proj.bias", sharded_layouts_by_name(model)).axis == -1);
}

TEST_CASE("tensor_parallel_specs splits attention and MLP pairs inside blocks, on any slice of a model") {
  const auto gpt = gpt_layer_specs(gpt_config{2, 16, 4, 8, 256});
  const auto split = tensor_parallel_specs(gpt);
  REQUIRE(split.size() == gpt.size());
  const std::string block = "block[residual[layernorm:16,head_parallel_attention:16:4],residual[layernorm:16,"
                            "column_linear:16:64,gelu,row_linear:64:16]]";
  CHECK(split == std::vector<std::string>{"embedding:256:16", "position:8:16", block, block, "layernorm:16",
                                          "linear:16:256"});  // embeddings, final LayerNorm and LM head whole
  const std::vector<std::string> chunk(gpt.begin() + 3, gpt.end());  // a pipeline chunk: block 1 and the head
  CHECK(tensor_parallel_specs(chunk) == std::vector<std::string>(split.begin() + 3, split.end()));
  // Plain MLPs pair as before; a pair never spans a composite's edge or a dropout.
  const std::vector<std::string> mlp = {"linear:8:16", "relu", "linear:16:8", "linear:8:4"};
  CHECK(tensor_parallel_specs(mlp) == megatron_mlp_specs(mlp));
  CHECK(tensor_parallel_specs({"residual[linear:8:16,dropout:0.1:3,linear:16:8]", "linear:8:8"}) ==
        std::vector<std::string>{"residual[linear:8:16,dropout:0.1:3,linear:16:8]", "linear:8:8"});
  CHECK(tensor_parallel_specs({"residual[linear:8:16,tanh,linear:16:8]", "attention:8:2"}) ==
        std::vector<std::string>{"residual[column_linear:8:16,tanh,row_linear:16:8]", "head_parallel_attention:8:2"});
}

TEST_CASE("the parallel layers' stashes count their bytes: what column, row and head-parallel layers hold") {
  // Split over 2 ranks (threads of one group): each rank's cache after a forward says the bytes of the
  // tensors it holds, non-zero, field by field (float32, 4 bytes an element).
  constexpr int ranks = 2;
  local_group group("tp", ranks);
  struct counted {
    std::size_t column = 0, row = 0, attention = 0;  // cache.bytes() after one forward
    std::size_t column_x = 0, row_x = 0, attention_fields = 0;  // the bytes of the saved fields themselves
  };
  std::vector<counted> got(ranks);
  std::vector<std::string> errors(ranks);
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      const auto i = static_cast<std::size_t>(r);
      try {
        const auto run = [&](const std::string& spec, const tensor& x, layer_cache& cache) {
          auto l = make_layer(spec);
          dynamic_cast<tensor_parallel_layer&>(*l).join_group(group.member(r));
          l->initialize(3);
          l->forward(x, cache, {});
          return l;
        };
        layer_cache column_cache, row_cache, attention_cache;
        auto column = run("column_linear:8:16", random_tensor({5, 8}, 1), column_cache);
        auto row = run("row_linear:16:8", random_tensor({5, 8}, 2), row_cache);  // this rank's 8 of 16 columns
        auto attention = run("head_parallel_attention:16:4", random_tensor({2, 8, 16}, 3), attention_cache);
        got[i].column = column_cache.bytes();
        got[i].row = row_cache.bytes();
        got[i].attention = attention_cache.bytes();
        got[i].column_x = column_cache.get<column_parallel_linear::saved>(*column).x.byte_size();
        got[i].row_x = row_cache.get<row_parallel_linear::saved>(*row).x.byte_size();
        const auto& s = attention_cache.get<head_parallel_attention::saved>(*attention);
        got[i].attention_fields = s.qkv.bytes() + s.proj.bytes() + s.heads.q.byte_size() + s.heads.k.byte_size() +
                                  s.heads.v.byte_size() + s.heads.probs.byte_size() + s.dqkv.byte_size();
      } catch (const std::exception& e) {
        errors[i] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  for (auto& e : errors) REQUIRE_MESSAGE(e.empty(), e);
  for (const counted& c : got) {
    CHECK(c.column == 5u * 8u * 4u);  // x (5, 8), whole
    CHECK(c.column == c.column_x);
    CHECK(c.row == 5u * 8u * 4u);     // x (5, 8): this rank's shard of the 16 input columns
    CHECK(c.row == c.row_x);
    // B = 2, T = 8, D = 16, 2 of 4 heads of width 4 (w = 8): the QKV projection's x (B, T, D), the output
    // projection's x (B, T, w), q, k, v (B*2, T, 4) each, probs (B*2, T, T); dqkv, filled by backward_input,
    // is still a default tensor (a scalar: one element).
    CHECK(c.attention == (2u * 8u * 16u + 2u * 8u * 8u + 3u * 4u * 8u * 4u + 4u * 8u * 8u + 1u) * 4u);
    CHECK(c.attention == c.attention_fields);
  }
}

TEST_CASE("the fused backward computes the weight gradients while its all-reduce runs, with the bits of input then weight") {
  // Note [overlapped backward]. For each model: the parameters whose gradients are computed by the time the
  // backward's last all-reduce (the lowest column layer's partial dx) is waited on. The fused backward has
  // them all by then; backward_input then backward_weight has none (nothing waits in backward_weight).
  struct model_case {
    std::vector<std::string> specs;
    std::vector<std::size_t> x_shape;
    int computed_fused;  // gradients computed by the last wait in the fused backward
  };
  const std::vector<model_case> cases = {
      {{"column_linear:8:12", "gelu", "row_linear:12:8"}, {5, 8}, 4},  // both layers' weight and bias
      {{"head_parallel_attention:16:4"}, {2, 8, 16}, 4},                // both projections' weight and bias
      // All 12 but the first layer norm's 2, whose backward follows the attention's all-reduce.
      {tensor_parallel_specs({gpt_block_spec(16, 4)}), {2, 8, 16}, 10},
      {{"parallel_swiglu_mlp:8:12"}, {5, 8}, 4},  // both projections' weight and bias
      // A LLaMA-style block with biases: all 10 but the first RMSNorm's weight.
      {tensor_parallel_specs({gpt_block_spec(parse_gpt_spec(llama_block_spec))}), {2, 8, 16}, 9},
  };
  for (const model_case& c : cases) {
    CAPTURE(c.specs.front());
    const tensor x = random_tensor(c.x_shape, 41), dy = random_tensor(c.x_shape, 42);
    std::map<bool, std::vector<rank_result>> results;
    for (bool split_iw : {false, true}) {
      CAPTURE(split_iw);
      local_group group("tp", 2);
      std::vector<rank_result> got(2);
      std::vector<int> computed_at_last_wait(2, -1);
      std::vector<std::thread> threads;
      for (int r = 0; r < 2; ++r)
        threads.emplace_back([&, r] {
          sequential model = sequential::from_layer_specs(c.specs);
          join_tensor_parallel(model, std::make_shared<observed_group>(group.member(r), nullptr, [&, r] {
                                 computed_at_last_wait[r] = nonzero_gradients(model);
                               }));
          model.initialize(7);
          got[r] = forward_backward(model, x, dy, split_iw);
        });
      for (auto& t : threads) t.join();
      for (int r = 0; r < 2; ++r) {
        CAPTURE(r);
        CHECK(computed_at_last_wait[r] == (split_iw ? 0 : c.computed_fused));
      }
      results[split_iw] = std::move(got);
    }
    for (std::size_t r = 0; r < 2; ++r) {  // the same bits either way
      CHECK(check_close(results[false][r].dx, results[true][r].dx, 0.0, 0.0, "dx"));
      for (std::size_t k = 0; k < results[false][r].grads.size(); ++k)
        CHECK(check_close(results[false][r].grads[k], results[true][r].grads[k], 0.0, 0.0, "gradient"));
    }
  }
}

TEST_CASE("grouped-query attention with rotary positions over T ranks equals the unsplit layer, one all-reduce each way") {
  // Note [grouped-query attention], Note [head-parallel attention]: a rank takes whole groups of heads.
  const tensor x = random_tensor({2, 8, 16}, 51), dy = random_tensor({2, 8, 16}, 52);
  for (const char* options : {":kv_heads=2:rope=10000", ":kv_heads=2", ":kv_heads=1:rope=100:bias=0", ":rope=10000"}) {
    CAPTURE(options);
    const rank_result expected = run_whole({std::string("attention:16:4") + options}, x, dy);
    const std::vector<int> ranks_of = std::string(options).find("kv_heads=1") != std::string::npos ? std::vector<int>{1}
                                      : std::string(options).find("kv_heads") != std::string::npos ? std::vector<int>{1, 2}
                                                                                                  : std::vector<int>{1, 2, 4};
    for (int ranks : ranks_of)
      for (bool split_iw : {false, true}) {
        CAPTURE(ranks);
        CAPTURE(split_iw);
        const auto got = run_split({std::string("head_parallel_attention:16:4") + options}, ranks, x, dy, split_iw);
        for (const rank_result& g : got) {
          CHECK(g.forward_all_reduces == 1);
          CHECK(g.backward_all_reduces == 1);
        }
        check_split_equals_whole(got, expected);
      }
  }
  // Unsplit, head-parallel attention is attention bit for bit, with these options too.
  auto parallel = make_layer("head_parallel_attention:16:4:kv_heads=2:rope=10000");
  auto plain = make_layer("attention:16:4:kv_heads=2:rope=10000");
  parallel->initialize(3);
  plain->initialize(3);
  layer_cache c1, c2;
  CHECK(parallel->forward(x, c1, {}) == plain->forward(x, c2, {}));
  CHECK(parallel->backward(dy, c1) == plain->backward(dy, c2));
  const auto p1 = parallel->parameters("0."), p2 = plain->parameters("0.");
  REQUIRE(p1.size() == p2.size());
  for (std::size_t k = 0; k < p1.size(); ++k) {
    CHECK(p1[k].name == p2[k].name);
    CHECK(*p1[k].grad == *p2[k].grad);
  }
}

TEST_CASE("grouped-query attention: the QKV weight is cut per head in q and per kv head in k and v, and gathers back") {
  causal_self_attention whole(16, 4, attention_init{{}, {}, 2, 10000.0f});  // q at columns 0-15, k 16-23, v 24-31
  whole.initialize(5);
  const tensor& w = *whole.parameters("").at(0).value;  // (16, 32)
  const tensor& b = *whole.parameters("").at(1).value;  // (32)
  constexpr std::size_t ranks = 2;
  local_group group("tp", static_cast<int>(ranks));
  std::vector<head_parallel_attention> shards(ranks, head_parallel_attention(16, 4, attention_init{{}, {}, 2, 10000.0f}));
  std::vector<const tensor*> weights, biases;
  for (std::size_t r = 0; r < ranks; ++r) {
    shards[r].join_group(group.member(static_cast<int>(r)));
    shards[r].initialize(5);
    const auto values = shards[r].sharded_values();
    REQUIRE(values.size() == 3);
    CHECK(values[0].layout == shard_layout{1, std::vector<std::size_t>{16, 8, 8}});
    CHECK(values[1].layout == shard_layout{0, std::vector<std::size_t>{16, 8, 8}});
    CHECK(values[2].layout == shard_layout{0, 1});
    CHECK(shape_of(*values[0].value) == shape_t{16, 16});  // 2 heads of q, 1 kv head of k and of v: 8 + 4 + 4
    weights.push_back(values[0].value);
    biases.push_back(values[1].value);
    CHECK(check_close(*values[0].value, piece_along(w, values[0].layout, r, ranks), 0.0, 0.0, "piece of qkv.weight"));
    CHECK(check_close(*values[1].value, piece_along(b, values[1].layout, r, ranks), 0.0, 0.0, "piece of qkv.bias"));
  }
  // Rank 1: q of heads 2, 3 (columns 8-15), k and v of kv head 1 (columns 20-23 and 28-31).
  const tensor& piece = *weights[1];
  for (std::size_t i = 0; i < 16; ++i) {
    CHECK(piece.data()[i * 16] == w.data()[i * 32 + 8]);
    CHECK(piece.data()[i * 16 + 8] == w.data()[i * 32 + 20]);
    CHECK(piece.data()[i * 16 + 12] == w.data()[i * 32 + 28]);
  }
  const shard_layout columns{1, std::vector<std::size_t>{16, 8, 8}};
  CHECK(check_close(gather_pieces(weights, columns), w, 0.0, 0.0, "gathered qkv.weight"));
  CHECK(check_close(gather_pieces(biases, {0, std::vector<std::size_t>{16, 8, 8}}), b, 0.0, 0.0, "gathered qkv.bias"));
  const std::vector<const tensor*> missing(weights.begin(), weights.end() - 1);
  tensor target = w;
  CHECK_THROWS_AS(gather_along(missing, columns, target), std::invalid_argument);
  CHECK(shard_layout(1, std::vector<std::size_t>{8, 8, 8}) == shard_layout{1, 3});  // equal blocks: one spelling
  // The unequal blocks read back through column_linear's spec.
  CHECK(make_layer("column_linear:16:32:16+8+8")->spec() == "column_linear:16:32:16+8+8");
  CHECK(error_of([] { make_layer("column_linear:16:32:16+8+4"); }) ==
        "bad layer spec 'column_linear:16:32:16+8+4': the block widths 16+8+4 sum to 28, not OUT (32)");
}

TEST_CASE("grouped-query attention refuses a T that does not divide its kv heads, naming the layer, the kv heads and T") {
  local_group group("tp stage 0", 4);
  auto attention = make_layer("head_parallel_attention:16:4:kv_heads=2:rope=10000");  // 4 divides the heads, not 2
  auto* p = dynamic_cast<tensor_parallel_layer*>(attention.get());
  REQUIRE(p);
  CHECK_THROWS_WITH_AS(p->join_group(group.member(0)),
                       "HeadParallelAttention(16, 4 heads, 2 kv heads, rope) cannot split its 2 kv heads over 4 "
                       "tensor-parallel ranks of group 'tp stage 0': 4 does not divide 2 (each rank takes whole groups "
                       "of heads sharing a kv head)",
                       std::invalid_argument);
  CHECK(attention->describe() == "HeadParallelAttention(16, 4 heads, 2 kv heads, rope)");  // nothing was cut
}

TEST_CASE("the SwiGLU MLP over T ranks equals the unsplit one with one all-reduce each way, and unsplit is swiglu_mlp bit for bit") {
  // Note [tensor-parallel SwiGLU].
  const tensor x = random_tensor({2, 3, 8}, 61), dy = random_tensor({2, 3, 8}, 62);
  for (const char* options : {"", ":std=0.1:down_std=0.05:bias=0"}) {
    CAPTURE(options);
    const rank_result expected = run_whole({std::string("swiglu_mlp:8:12") + options}, x, dy);
    for (int ranks : {1, 2, 4})
      for (bool split_iw : {false, true}) {
        CAPTURE(ranks);
        CAPTURE(split_iw);
        const auto got = run_split({std::string("parallel_swiglu_mlp:8:12") + options}, ranks, x, dy, split_iw);
        for (const rank_result& g : got) {
          CHECK(g.forward_all_reduces == 1);   // the down projection's partial products
          CHECK(g.backward_all_reduces == 1);  // the fused gate and up projection's partial dx
        }
        check_split_equals_whole(got, expected);
      }
  }
  auto parallel = make_layer("parallel_swiglu_mlp:8:12"), plain = make_layer("swiglu_mlp:8:12");
  parallel->initialize(3);
  plain->initialize(3);
  layer_cache c1, c2;
  CHECK(parallel->forward(x, c1, {}) == plain->forward(x, c2, {}));
  CHECK(parallel->backward(dy, c1) == plain->backward(dy, c2));
  const auto p1 = parallel->parameters("0."), p2 = plain->parameters("0.");
  REQUIRE(p1.size() == p2.size());
  for (std::size_t k = 0; k < p1.size(); ++k) {
    CHECK(p1[k].name == p2[k].name);
    CHECK(*p1[k].value == *p2[k].value);
    CHECK(*p1[k].grad == *p2[k].grad);
  }
  check_layer_gradients(*parallel, random_tensor({3, 8}, 63), {});
  // Its gate and up columns are cut as 2 blocks: rank r holds gate units and the same up units.
  local_group pair("tp", 2);
  parallel_swiglu_mlp shard(8, 12);
  shard.join_group(pair.member(1));
  const auto values = shard.sharded_values();
  REQUIRE(values.size() == 3);  // gate_up weight and bias, down weight (its bias is whole)
  CHECK(values[0].layout == shard_layout{1, 2});
  CHECK(values[2].layout == shard_layout{0, 1});
  CHECK(shard.describe() == "ParallelSwiGLU(8->12->8) rank 1 of 2");
  local_group three("tp stage 1", 5);
  parallel_swiglu_mlp odd(8, 12);
  CHECK_THROWS_WITH_AS(odd.join_group(three.member(0)),
                       "ParallelSwiGLU(8->12->8) cannot split its 12 hidden units over 5 tensor-parallel ranks of group "
                       "'tp stage 1': 5 does not divide 12",
                       std::invalid_argument);
}

TEST_CASE("a LLaMA-style block over T = 2 has exactly 2 all-reduces each way, and a llama-tiny model over 2 ranks equals one process") {
  const std::vector<std::string> whole = {gpt_block_spec(parse_gpt_spec(llama_block_spec))};
  const std::vector<std::string> split = tensor_parallel_specs(whole);
  CHECK(split == std::vector<std::string>{"block[residual[rmsnorm:16,head_parallel_attention:16:4:kv_heads=2:rope=10000],"
                                          "residual[rmsnorm:16,parallel_swiglu_mlp:16:24]]"});
  const tensor x = random_tensor({2, 8, 16}, 71), dy = random_tensor({2, 8, 16}, 72);
  const rank_result expected = run_whole(whole, x, dy);
  for (bool split_iw : {false, true}) {
    CAPTURE(split_iw);
    const auto got = run_split(split, 2, x, dy, split_iw);
    for (const rank_result& g : got) {
      CHECK(g.forward_all_reduces == 2);   // attention's output projection, the MLP's down projection
      CHECK(g.backward_all_reduces == 2);  // attention's QKV dx, the MLP's gate and up dx
    }
    check_split_equals_whole(got, expected);
  }
  tensor ids = tensor::from_shape({2, 8});
  for (std::size_t i = 0; i < ids.size(); ++i) ids.data()[i] = float((i * 137 + 11) % 300);
  const tensor logits_dy = random_tensor({2, 8, 300}, 73, 0.01f);
  const std::vector<std::string> model = gpt_layer_specs(parse_gpt_spec("llama-tiny:dim=16,heads=4,context=8,vocab=300,mlp=24"));
  const std::vector<std::string> model_split = tensor_parallel_specs(model);
  CHECK(model_split[1].find("head_parallel_attention:16:4:std=0.02:proj_std=0.01:bias=0:kv_heads=2:rope=10000") !=
        std::string::npos);
  CHECK(model_split[1].find("parallel_swiglu_mlp:16:24:std=0.02:down_std=0.01:bias=0") != std::string::npos);
  check_split_equals_whole(run_split(model_split, 2, ids, logits_dy), run_whole(model, ids, logits_dy));
}

// Activation recomputation (Note [recomputation] in model/block.hpp): a recomputing block keeps only its input
// between forward and backward, and gives the gradients of the block that keeps everything, bit for bit, in
// float32 and bfloat16, with dropout, with the split backward, for a Sequential and a GPT (LLaMA-style blocks too).
#include <doctest/doctest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "model/block.hpp"
#include "model/gpt_spec.hpp"
#include "model/layer_registry.hpp"
#include "model/sequential.hpp"
#include "test_support.hpp"

using namespace ap;
using namespace ap::test;

namespace {

const char* const dropout_block = "residual[layernorm:8,linear:8:16,gelu,dropout:0.25:9,linear:16:8]";

struct pass_result {
  tensor y, dx;
  std::vector<tensor> grads;
  std::size_t stashed = 0;  // bytes the caches held between the forward and the backward
};

// One forward and backward of `model` on x with loss gradient dy; the split backward (input, then weight) or
// the fused one.
pass_result run(sequential& model, const tensor& x, const tensor& dy, bool split) {
  sequential_cache cache;
  pass_result out;
  out.y = model.forward(x, cache, forward_context{true, 3, 40});
  out.stashed = stashed_bytes(cache);
  if (split) {
    out.dx = model.backward_input(dy, cache, true);
    model.backward_weight(cache);
  } else {
    out.dx = model.backward(dy, cache, true);
  }
  for (parameter& p : model.parameters()) out.grads.push_back(*p.grad);
  return out;
}

void check_identical(const pass_result& a, const pass_result& b) {
  CHECK(check_close(a.y, b.y, 0.0, 0.0, "y"));
  CHECK(check_close(a.dx, b.dx, 0.0, 0.0, "dx"));
  REQUIRE(a.grads.size() == b.grads.size());
  for (std::size_t k = 0; k < a.grads.size(); ++k) {
    CAPTURE(k);
    CHECK(check_close(a.grads[k], b.grads[k], 0.0, 0.0, "gradient"));
  }
}

}  // namespace

TEST_CASE("recomputed blocks give the gradients of kept ones, bit for bit, and stash only their inputs") {
  struct model_case {
    std::vector<std::string> specs;
    std::vector<std::size_t> x_shape;
  };
  const std::string llama_block = gpt_block_spec(parse_gpt_spec("llama-tiny:dim=16,heads=4,mlp=24"));
  const std::vector<model_case> cases = {
      {{dropout_block, dropout_block, "linear:8:5"}, {6, 8}},
      {{"residual[block[linear:8:8,tanh],residual[layernorm:8,linear:8:8]]"}, {6, 8}},  // nested
      {{gpt_block_spec(16, 4), gpt_block_spec(16, 4)}, {2, 8, 16}},                   // decoder blocks
      // LLaMA-style: grouped-query attention with rotary positions, the SwiGLU MLP, RMSNorm
      {{llama_block, llama_block}, {2, 8, 16}},
  };
  for (const model_case& c : cases)
    for (dtype type : {dtype::float32, dtype::bfloat16})
      for (bool split : {false, true}) {
        CAPTURE(c.specs.front());
        CAPTURE(dtype_name(type));
        CAPTURE(split);
        const tensor x = random_tensor(c.x_shape, 1);
        tensor dy = random_tensor(c.x_shape, 2);
        sequential kept = sequential::from_layer_specs(c.specs), recomputed = sequential::from_layer_specs(c.specs);
        kept.initialize(11);
        recomputed.initialize(11);
        for (sequential* m : {&kept, &recomputed}) m->set_compute_dtype(type);
        recomputed.set_recompute(recompute_mode::blocks);
        // The output's shape: run the kept model once for it (a fresh cache each time).
        const tensor y_shape = kept.forward(x, forward_context{false, 0, 0});
        dy = random_tensor(y_shape.shape(), 2);
        const pass_result a = run(kept, x, dy, split), b = run(recomputed, x, dy, split);
        check_identical(b, a);
        // Between forward and backward a recomputing block holds its input only: one (rows, width) tensor
        // per block, less than what its layer norm, linears and GELU keep.
        CHECK(b.stashed < a.stashed);
        std::size_t inputs = 0;
        for (std::size_t i = 0; i < recomputed.size(); ++i)
          if (recomputed.at(i).recomputes()) inputs += x.byte_size();
        CHECK(b.stashed <= inputs + a.stashed / 2);
      }
}

TEST_CASE("recompute settings: only blocks recompute, layers added later, slices and clones keep it, names parse") {
  sequential m = sequential::from_layer_specs({dropout_block, "linear:8:5"});
  CHECK(m.recompute() == recompute_mode::none);
  CHECK_FALSE(m.at(0).recomputes());
  m.set_recompute(recompute_mode::blocks);
  CHECK(m.at(0).recomputes());
  CHECK_FALSE(m.at(1).recomputes());  // a Linear keeps what it keeps
  m.add(make_layer("relu"));
  m.add(make_layer("residual[layernorm:5,linear:5:5]"));
  CHECK(m.at(3).recomputes());
  sequential s = m.slice(3, 4);
  CHECK(s.recompute() == recompute_mode::blocks);
  CHECK(s.at(0).recomputes());
  CHECK(m.clone().at(0).recomputes());
  m.set_recompute(recompute_mode::none);
  CHECK_FALSE(m.at(3).recomputes());
  CHECK(parse_recompute_mode("blocks") == recompute_mode::blocks);
  CHECK(parse_recompute_mode("none") == recompute_mode::none);
  CHECK(std::string(recompute_mode_name(recompute_mode::blocks)) == "blocks");
  CHECK_THROWS_WITH_AS(parse_recompute_mode("layers"), "unknown recompute mode 'layers': choose none or blocks",
                       std::invalid_argument);
  CHECK_FALSE(recompute_mode_from_code(2).has_value());
}

TEST_CASE("a recomputing block joins no caches: the synchronous backward refuses it instead of guessing") {
  auto b = make_layer(dropout_block);
  b->initialize(3);
  b->set_recompute(true);
  layer_cache first, second;
  b->forward(random_tensor({2, 8}, 1), first, forward_context{true, 0, 0});
  b->forward(random_tensor({2, 8}, 2), second, forward_context{true, 0, 2});
  CHECK_FALSE(layer_cache::join({&first, &second}).has_value());
  // Not recomputing, the same block joins.
  b->set_recompute(false);
  b->forward(random_tensor({2, 8}, 1), first, forward_context{true, 0, 0});
  b->forward(random_tensor({2, 8}, 2), second, forward_context{true, 0, 2});
  CHECK(layer_cache::join({&first, &second}).has_value());
}

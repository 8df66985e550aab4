// Tied weights (Note [tied weights] in model/weight_tie.hpp): a GPT whose LM head is its token embedding's
// table transposed starts and stays tied, its gradient is the finite-difference gradient of the one shared
// weight, and every mesh (stages, schedules, replicas, tensor-parallel ranks, node processes, clipping) trains
// it as one process does.
#include <doctest/doctest.h>

#include <set>

#include "actors/data_parallel_pipeline.hpp"
#include "checkpoint/safetensors.hpp"
#include "equivalence.hpp"
#include "gradient_check.hpp"
#include "model/gpt_spec.hpp"
#include "model/loss.hpp"
#include "model/weight_tie.hpp"
#include "node_process.hpp"
#include "pipeline_test_models.hpp"
#include "random/seeded_random.hpp"
#include "test_support.hpp"
#include "training/trainer.hpp"

using namespace ap;

namespace {

using test::token_batch;

const char* const tied_gpt = "gpt:layers=2,dim=16,heads=2,context=8,vocab=40,tied=1";  // 6 layers, head = layer 5
constexpr int steps = 3;
constexpr float weight_tolerance = 1e-5f;  // as test_pipeline_gpt.cpp's, with the same optimizer

sequential make_gpt(const char* spec = tied_gpt) { return sequential::from_spec(spec, sequential_options{"relu", 7}); }

optimizer_config adamw() {
  optimizer_config o;
  o.kind = "adamw";
  o.lr = 1e-3f;
  o.weight_decay = 0.1f;
  o.eps = 1e-4f;  // see test_pipeline_gpt.cpp's adamw()
  return o;
}

const tensor& weight_of(sequential& m, const std::string& name) {
  for (const parameter& p : m.parameters())
    if (p.name == name) return *p.value;
  FAIL("no parameter " << name);
  throw std::logic_error("unreachable");
}

// The head's weight is the embedding's table transposed, bit for bit.
void check_tied(sequential& m, const std::string& label) {
  INFO(label);
  const tensor& table = weight_of(m, "0.weight");
  const tensor& head = weight_of(m, "5.weight");
  REQUIRE(head.shape()[0] == table.shape()[1]);
  REQUIRE(head.shape()[1] == table.shape()[0]);
  std::size_t differ = 0;
  for (std::size_t v = 0; v < table.shape()[0]; ++v)
    for (std::size_t d = 0; d < table.shape()[1]; ++d)
      differ += table.data()[v * table.shape()[1] + d] != head.data()[d * table.shape()[0] + v];
  CHECK(differ == 0);
}

test::run_result train_single(const dataset& d, float clip = 0.0f, const char* spec = tied_gpt) {
  test::run_result r{make_gpt(spec), {}};
  local_runner runner(r.model, adamw(), "cross_entropy", clip);
  for (int s = 0; s < steps; ++s) r.losses.push_back(runner.train_step(d.inputs, d.labels, s));
  return r;
}

pipeline_options options(const std::string& schedule, int stages, int microbatches, int chunks = 1) {
  return test::pipeline_options_for(stages, microbatches, schedule, chunks, adamw());
}

test::run_result train_mesh(const dataset& d, const pipeline_options& o, int replicas = 1, const char* spec = tied_gpt) {
  data_parallel_pipeline mesh(make_gpt(spec), o, replicas);
  test::run_result r{sequential{}, {}};
  for (int s = 0; s < steps; ++s) r.losses.push_back(mesh.train_step(d.inputs, d.labels, s));
  r.model = mesh.first().gather_model();
  return r;
}

}  // namespace

TEST_CASE("tied GPT: the head starts as the embedding's table transposed, in the whole model and in a slice") {
  sequential m = make_gpt();
  CHECK(m.at(5).spec() == "linear:16:40:bias=0:tie=0");
  check_tied(m, "whole model");
  // A pipeline's last stage builds the head alone, from its spec and global index: it draws the same table.
  sequential last = sequential::from_layer_specs({m.at(4).spec(), m.at(5).spec()}, 4);
  last.initialize(7);
  CHECK(test::check_tensor(weight_of(last, "5.weight"), weight_of(m, "5.weight"), 0.0f, "the head built alone"));
  const auto ties = weight_ties(m, true);
  REQUIRE(ties.size() == 1);
  CHECK(ties[0].owner == "0.weight");
  CHECK(ties[0].copy == "5.weight");
  CHECK(parse_gpt_spec(gpt_spec_text(parse_gpt_spec(tied_gpt))).tied);
  CHECK(parse_gpt_spec("gpt2-tiny").tied);
  CHECK_FALSE(parse_gpt_spec("gpt2-tiny:tied=0").tied);
}

TEST_CASE("tied GPT: the tied gradient is the finite-difference gradient of the one shared table") {
  sequential m = sequential::from_spec("gpt:layers=1,dim=8,heads=2,context=4,vocab=6,tied=1", sequential_options{"relu", 3});
  const std::size_t head = m.size() - 1;
  const dataset d = token_batch(6, 4, 2, 11);
  const auto ties = weight_ties(m, true);
  auto loss_fn = make_loss("cross_entropy");
  // A table of unit scale: GPT-2's 0.02 would make the first LayerNorm's input mostly the perturbation.
  for (parameter& p : m.parameters())
    if (p.name == "0.weight") *p.value = test::random_tensor(shape_of(*p.value), 21);
  for (parameter& p : m.parameters())
    if (p.name == std::to_string(head) + ".weight") p.value->fill(0.0f), add_tied(*p.value, test::random_tensor({6, 8}, 21));
  m.zero_grad();
  sequential_cache cache;
  const tensor out = m.forward(d.inputs, cache, forward_context{true, 0, 0});
  m.backward(loss_fn->compute_loss_and_gradient(out, d.labels).gradient, cache, false);
  const auto params = m.parameters();
  tie_gradients(params, ties);
  tensor* table = nullptr;
  tensor* head_weight = nullptr;
  tensor table_grad, head_grad;
  for (const parameter& p : params) {
    if (p.name == "0.weight") table = p.value, table_grad = *p.grad;
    if (p.name == std::to_string(head) + ".weight") head_weight = p.value, head_grad = *p.grad;
  }
  REQUIRE(table);
  REQUIRE(head_weight);
  // The loss as a function of the shared table: the head always set to its transpose.
  tensor shared = *table;
  const auto loss_of_shared = [&]() -> double {
    *table = shared;
    head_weight->fill(0.0f);
    add_tied(*head_weight, shared);
    return loss_fn->compute_loss_and_gradient(m.forward(d.inputs), d.labels).loss;
  };
  const tensor numeric = test::numeric_gradient(loss_of_shared, shared, 1e-2f);
  CHECK(test::check_tensor(table_grad, numeric, 2e-3f, "tied gradient against finite differences"));
  tensor transposed = zeros(shape_of(table_grad));
  add_tied(transposed, head_grad);
  CHECK(test::check_tensor(transposed, table_grad, 0.0f, "the head's copy of the sum"));
}

TEST_CASE("tied GPT: one process keeps the two copies equal bit for bit, and a tie to the wrong layer is refused") {
  const dataset d = token_batch(40, 8, 6, 5);
  test::run_result single = train_single(d, 0.5f);
  CHECK(single.losses[2] < single.losses[0]);
  check_tied(single.model, "one process, 3 steps with clipping");
  CHECK(test::check_refused([] { sequential::from_layer_specs({"embedding:40:16", "linear:16:30:tie=0"}); },
                            {"layer 1 (linear:16:30:tie=0) is tied to layer 0 (embedding:40:16)", "transpose"})
            .size());
  CHECK(test::check_refused([] { sequential::from_layer_specs({"linear:16:40:tie=1", "embedding:40:16"}); },
                            {"layer 0", "tied to layer 1, which does not come before it"})
            .size());
}

TEST_CASE("tied GPT on every mesh equals one process: stages, schedules, replicas, T = 2, clipping") {
  const dataset d = token_batch(40, 8, 8, 5);
  test::run_result single = train_single(d), clipped = train_single(d, 0.5f);
  struct mesh {
    int D, P, T, chunks, microbatches;
    const char* schedule;
    float clip;
  };
  for (const mesh m : {mesh{1, 1, 1, 1, 2, "1f1b", 0.0f}, mesh{1, 2, 1, 1, 4, "1f1b", 0.0f},
                       mesh{1, 3, 1, 1, 4, "zb-h1", 0.0f}, mesh{1, 2, 1, 1, 2, "gpipe", 0.5f},
                       mesh{1, 3, 1, 2, 3, "interleaved", 0.0f}, mesh{2, 2, 1, 1, 2, "1f1b", 0.5f},
                       mesh{1, 2, 2, 1, 2, "1f1b", 0.0f}, mesh{2, 2, 2, 1, 2, "zb-h1", 0.5f}}) {
    const std::string label = std::string(m.schedule) + " D=" + std::to_string(m.D) + " P=" + std::to_string(m.P) +
                              " T=" + std::to_string(m.T) + " v=" + std::to_string(m.chunks) + " clip " +
                              std::to_string(m.clip);
    pipeline_options o = options(m.schedule, m.P, m.microbatches, m.chunks);
    o.tensor_parallel = m.T;
    o.clip_grad_norm = m.clip;
    test::run_result r = train_mesh(d, o, m.D);
    test::check_same_run(r, m.clip > 0.0f ? clipped : single, weight_tolerance, 1e-5, label);
    check_tied(r.model, label);
  }
}

TEST_CASE("tied GPT on 2 node processes at T = 2 equals one process: the tied gradients and the labels cross the network") {
  const dataset d = token_batch(40, 8, 8, 5);
  const std::string actorpipe = std::string(AP_BINARY_DIR) + "/cli/actorpipe";
  test::node_process a(actorpipe), b(actorpipe);
  test::run_result single = train_single(d);
  pipeline_options o = options("1f1b", 2, 4);
  o.tensor_parallel = 2;  // the last stage computes the loss from the labels it is sent (Note [vocab-parallel])
  o.nodes = {a.address(), b.address()};
  o.security = test::tls_security();
  pipeline pipe(make_gpt(), o);
  test::run_result remote{sequential{}, {}};
  for (int s = 0; s < steps; ++s) remote.losses.push_back(pipe.train_step(d.inputs, d.labels, s));
  remote.model = pipe.gather_model();
  test::check_same_run(remote, single, weight_tolerance, 1e-5, "1f1b p=2 t=2 on 2 nodes");
  check_tied(remote.model, "on 2 nodes");
}

TEST_CASE("tied GPT checkpoint: stored once, resumed on 3 stages and in one process as the uninterrupted run") {
  const dataset d = token_batch(40, 8, 8, 5);
  test::run_result single = train_single(d);
  test::scratch_dir dir{"tied_checkpoint"};
  const std::string path = dir.file("tied.safetensors");
  {
    pipeline pipe(make_gpt(), options("1f1b", 2, 2));
    for (int s = 0; s < 2; ++s) pipe.train_step(d.inputs, d.labels, s);
    pipe.save_checkpoint(path, training_state{});
  }
  std::set<std::string> names;
  read_safetensors(path, [&](const std::string& name) {
    names.insert(name);
    return false;
  });
  CHECK(names.count("0.weight") == 1);
  CHECK(names.count("optimizer/0.weight.m") == 1);
  CHECK(names.count("5.weight") == 0);
  CHECK(names.count("optimizer/5.weight.m") == 0);

  pipeline three(make_gpt(), options("zb-h1", 3, 4));
  three.load_checkpoint(path);
  test::run_result resumed{sequential{}, {0.0, 0.0}};
  resumed.losses.push_back(three.train_step(d.inputs, d.labels, 2));
  resumed.losses[0] = single.losses[0], resumed.losses[1] = single.losses[1];
  resumed.model = three.gather_model();
  test::check_same_run(resumed, single, weight_tolerance, 1e-5, "2 stages saved, 3 stages resumed");
  check_tied(resumed.model, "resumed on 3 stages");

  sequential local_model = make_gpt();
  local_runner local(local_model, adamw());
  local.load_checkpoint(path);
  test::run_result one{sequential{}, {single.losses[0], single.losses[1], local.train_step(d.inputs, d.labels, 2)}};
  one.model = std::move(local_model);
  test::check_same_run(one, single, weight_tolerance, 1e-5, "2 stages saved, one process resumed");
}

// Checkpoints of a model and its optimizer: resuming gives the same training, stages load their own layers,
// and every refusal names the file and the tensor.
#include <doctest/doctest.h>

#include <unistd.h>

#include <filesystem>
#include <stdexcept>
#include <string>

#include "checkpoint/checkpoint.hpp"
#include "checkpoint/safetensors.hpp"
#include "equivalence.hpp"
#include "model/loss.hpp"
#include "random/seeded_random.hpp"
#include "test_support.hpp"

using namespace ap;
namespace fs = std::filesystem;

namespace {

using namespace ap::test;

// One batch of a small regression task.
struct batch {
  tensor x;  // (8, 4)
  tensor y;  // (8, 3)
};
batch make_batch(std::uint64_t seed) { return {random_tensor({8, 4}, seed), random_tensor({8, 3}, seed + 1000)}; }

// llm.c's loop: forward; zero_grad; backward; update.
void train_step(sequential& model, optimizer& opt, const batch& b) {
  const mean_squared_error loss;
  sequential_cache cache;
  const tensor out = model.forward(b.x, cache, {true, std::uint64_t(opt.steps()), 0});
  model.zero_grad();
  model.backward(loss.compute_gradient(out, b.y), cache, false);
  opt.step(model.parameters());
}

std::unique_ptr<optimizer> adam() {
  optimizer_config c;
  c.kind = "adam";
  c.lr = 0.01f;
  c.weight_decay = 0.01f;  // so that state and weights both matter
  return make_optimizer(c);
}

std::unique_ptr<optimizer> sgd(float momentum) {
  optimizer_config c;
  c.kind = "sgd";
  c.lr = 0.01f;
  c.momentum = momentum;
  return make_optimizer(c);
}

sequential tiny_model(std::uint64_t seed, const std::string& spec = "4-8-3") {
  sequential_options o;
  o.seed = seed;
  return sequential::from_spec(spec, o);
}

const training_state sample_state{2, 1, 7, 1234, "4-8-3"};

// Rewrites a checkpoint after `edit` changed its tensors or metadata.
template <class F>
void edit_checkpoint(const std::string& from, const std::string& to, F edit) {
  safetensors_file file = read_safetensors(from);
  edit(file);
  write_safetensors(to, file.tensors, file.metadata);
}

}  // namespace

TEST_CASE("checkpoint round trip: resuming from a checkpoint trains exactly like not stopping") {
  scratch_dir dir{"checkpoint_model"};
  const std::string path = dir.file("run.safetensors");
  sequential model = tiny_model(1);
  auto opt = adam();
  train_step(model, *opt, make_batch(1));
  train_step(model, *opt, make_batch(2));
  save_checkpoint(path, model, opt.get(), sample_state);

  sequential resumed = tiny_model(99);  // other weights, so loading must overwrite them all
  auto resumed_opt = adam();           // fresh: no state yet (Note [fresh optimizer state])
  REQUIRE(resumed_opt->state().empty());
  const training_state state = load_checkpoint(path, resumed, resumed_opt.get());
  CHECK(state.step == 2);
  CHECK(state.epoch == 1);
  CHECK(state.batch_in_epoch == 7);
  CHECK(state.data_seed == 1234);
  CHECK(state.model_spec == "4-8-3");
  CHECK(resumed_opt->steps() == 2);
  CHECK(check_parameters(resumed, model, 0.0f, "resumed"));
  auto saved_state = opt->state();
  auto loaded_state = resumed_opt->state();
  REQUIRE(loaded_state.size() == saved_state.size());
  CHECK(loaded_state.size() == 8);  // m and v of 0.weight, 0.bias, 2.weight, 2.bias
  for (const auto& [key, t] : saved_state) CHECK(check_tensor(*loaded_state.at(key), *t, 0.0f, key));

  // One more step on both: identical weights, bit for bit.
  train_step(model, *opt, make_batch(3));
  train_step(resumed, *resumed_opt, make_batch(3));
  CHECK(check_parameters(resumed, model, 0.0f, "resumed"));
  CHECK(resumed_opt->steps() == opt->steps());
}

TEST_CASE("checkpoint file: global parameter names, optimizer state under optimizer/, the metadata") {
  scratch_dir dir{"checkpoint_model"};
  const std::string path = dir.file("run.safetensors");
  sequential model = tiny_model(1);
  auto opt = adam();
  train_step(model, *opt, make_batch(1));
  save_checkpoint(path, model, opt.get(), sample_state);

  const safetensors_file file = read_safetensors(path);
  std::map<std::string, std::string> metadata = file.metadata;  // less the checksums (Note [checkpoint checksums])
  CHECK(metadata.at("crc32c:2.weight").size() == 8);
  for (auto it = metadata.begin(); it != metadata.end();)
    it = it->first.rfind("crc32c:", 0) == 0 || it->first == "metadata_crc32c" ? metadata.erase(it) : std::next(it);
  CHECK(metadata == std::map<std::string, std::string>{{"format", "actorpipe-checkpoint-1"},
                                                            {"model", "linear:4:8;relu;linear:8:3"},
                                                            {"optimizer_steps", "1"},
                                                            {"optimizer_state", "included"},
                                                            {"step", "2"},
                                                            {"epoch", "1"},
                                                            {"batch_in_epoch", "7"},
                                                            {"data_seed", "1234"},
                                                            {"model_spec", "4-8-3"}});
  std::vector<std::string> names;
  for (const auto& [name, t] : file.tensors) names.push_back(name);
  CHECK(names == std::vector<std::string>{"0.bias", "0.weight", "2.bias", "2.weight", "optimizer/0.bias.m",
                                          "optimizer/0.bias.v", "optimizer/0.weight.m", "optimizer/0.weight.v",
                                          "optimizer/2.bias.m", "optimizer/2.bias.v", "optimizer/2.weight.m",
                                          "optimizer/2.weight.v"});
  CHECK(file.tensors.at("2.weight").shape() == tensor::shape_type{8, 3});

  // The header alone is enough to rebuild the model, which then loads the weights.
  const checkpoint_info info = read_checkpoint_info(path);
  CHECK(info.layer_specs == std::vector<std::string>{"linear:4:8", "relu", "linear:8:3"});
  CHECK(info.optimizer_steps == 1);
  CHECK(info.has_optimizer_state);
  CHECK(info.state.data_seed == 1234);
  sequential rebuilt = sequential::from_layer_specs(info.layer_specs);
  load_checkpoint(path, rebuilt, nullptr);
  CHECK(check_parameters(rebuilt, model, 0.0f, "rebuilt"));
}

TEST_CASE("checkpoint without an optimizer: weights only, and loading it into an optimizer is refused") {
  scratch_dir dir{"checkpoint_model"};
  const std::string path = dir.file("weights.safetensors");
  sequential model = tiny_model(1);
  save_checkpoint(path, model, nullptr, sample_state);
  CHECK(read_checkpoint_info(path).has_optimizer_state == false);
  sequential other = tiny_model(2);
  auto opt = adam();
  const std::string error = error_of([&] { load_checkpoint(path, other, opt.get()); });
  CHECK(contains(error, "checkpoint " + path + ": was saved without optimizer state"));
  load_checkpoint(path, other, nullptr);
  CHECK(check_parameters(other, model, 0.0f, "other"));

  // And the other way: optimizer state in the file, no optimizer given: the weights load.
  auto trained = adam();
  train_step(model, *trained, make_batch(1));
  save_checkpoint(path, model, trained.get(), sample_state);
  load_checkpoint(path, other, nullptr);
  CHECK(check_parameters(other, model, 0.0f, "other"));
}

TEST_CASE("checkpoint refusals name the file and the tensor, and leave the model unchanged") {
  scratch_dir dir{"checkpoint_model"};
  const std::string path = dir.file("good.safetensors");
  const std::string bad = dir.file("bad.safetensors");
  sequential model = tiny_model(1);
  auto opt = adam();
  train_step(model, *opt, make_batch(1));
  save_checkpoint(path, model, opt.get(), sample_state);

  sequential target = tiny_model(5);
  const sequential before = target.clone();
  const auto refusal = [&](const std::string& file, sequential& into, optimizer* o) {
    const std::string message = error_of([&] { load_checkpoint(file, into, o); });
    INFO(message);
    CHECK(contains(message, "checkpoint " + file + ": "));
    sequential copy = before.clone();
    CHECK(check_parameters(target, copy, 0.0f, "target"));  // a refused load changes nothing
    return message;
  };

  SUBCASE("missing parameter tensor") {
    edit_checkpoint(path, bad, [](safetensors_file& f) { f.tensors.erase("2.weight"); });
    CHECK(contains(refusal(bad, target, nullptr), "checkpoint " + bad + ": missing tensor 2.weight"));
  }
  SUBCASE("shape mismatch, naming both shapes") {
    edit_checkpoint(path, bad, [](safetensors_file& f) { f.tensors["2.weight"] = zeros({3, 8}); });
    CHECK(contains(refusal(bad, target, nullptr),
                   "tensor 2.weight has shape (3, 8) but the model's parameter has shape (8, 3)"));
  }
  SUBCASE("a bfloat16 tensor (a real BF16 entry in the file), naming both dtypes and shapes") {
    edit_checkpoint(path, bad, [](safetensors_file& f) { f.tensors["2.weight"] = f.tensors["2.weight"].astype(dtype::bfloat16); });
    REQUIRE(read_safetensors(bad).tensors.at("2.weight").type() == dtype::bfloat16);
    CHECK(contains(refusal(bad, target, nullptr),
                   "checkpoint " + bad + ": tensor 2.weight is bfloat16 (8, 3), the model's parameter is float32 (8, 3)"));
  }
  SUBCASE("unexpected extra parameter tensors") {
    edit_checkpoint(path, bad, [](safetensors_file& f) { f.tensors["2.gamma"] = zeros({3}); });
    CHECK(contains(refusal(bad, target, nullptr),
                   "unexpected tensor 2.gamma: layer 2 (linear:8:3) has no such parameter"));
    edit_checkpoint(path, bad, [](safetensors_file& f) { f.tensors["1.weight"] = zeros({3}); });
    CHECK(contains(refusal(bad, target, nullptr), "unexpected tensor 1.weight: layer 1 (relu) has no such parameter"));
    edit_checkpoint(path, bad, [](safetensors_file& f) { f.tensors["7.weight"] = zeros({3}); });
    CHECK(contains(refusal(bad, target, nullptr), "unexpected tensor 7.weight: it belongs to no layer"));
    edit_checkpoint(path, bad, [](safetensors_file& f) { f.tensors["embedding"] = zeros({3}); });
    CHECK(contains(refusal(bad, target, nullptr), "unexpected tensor embedding: it belongs to no layer"));
    edit_checkpoint(path, bad, [](safetensors_file& f) { f.tensors["optimizer/0.gamma.m"] = zeros({3}); });
    CHECK(contains(refusal(bad, target, nullptr),
                   "unexpected tensor optimizer/0.gamma.m: state of no parameter of layer 0 (linear:4:8)"));
  }
  SUBCASE("a different model, naming both") {
    sequential wider = tiny_model(5, "4-8-2");
    const std::string message = error_of([&] { load_checkpoint(path, wider, nullptr); });
    CHECK(contains(message, "checkpoint " + path + ": holds a different model: its layers are "
                            "[linear:4:8;relu;linear:8:3] (3 layers), this model's are [linear:4:8;relu;linear:8:2]"));
    sequential longer = tiny_model(5, "4-8-3-3");
    CHECK(contains(error_of([&] { load_checkpoint(path, longer, nullptr); }), "(3 layers), this model's are"));
  }
  SUBCASE("a bad format tag, or none") {
    edit_checkpoint(path, bad, [](safetensors_file& f) { f.metadata["format"] = "actorpipe-checkpoint-0"; });
    CHECK(contains(refusal(bad, target, nullptr),
                   "format 'actorpipe-checkpoint-0' is not 'actorpipe-checkpoint-1'"));
    edit_checkpoint(path, bad, [](safetensors_file& f) { f.metadata.clear(); });
    CHECK(contains(refusal(bad, target, nullptr), "not an actorpipe checkpoint: its metadata has no \"format\""));
    edit_checkpoint(path, bad, [](safetensors_file& f) { f.metadata["epoch"] = "-1"; });
    CHECK(contains(refusal(bad, target, nullptr), "metadata \"epoch\" is '-1', not a non-negative integer"));
  }
  SUBCASE("a missing file or a broken one: the safetensors reader names it") {
    CHECK(contains(error_of([&] { load_checkpoint(dir.file("none"), target, nullptr); }),
                   dir.file("none") + ": no such file"));
  }
  SUBCASE("optimizer state of another optimizer kind") {
    auto plain = sgd(0.0f);  // keeps no state at all
    CHECK(contains(refusal(path, target, plain.get()),
                   "unexpected tensor optimizer/0.bias.m: this optimizer has no such state (it has none)"));
    auto momentum = sgd(0.9f);
    CHECK(contains(refusal(path, target, momentum.get()),
                   "unexpected tensor optimizer/0.bias.m: this optimizer has no such state (it has 0.bias.momentum, "));
    // A checkpoint of a stateless optimizer loaded into Adam: Adam's state is missing from it.
    sequential model2 = tiny_model(1);
    train_step(model2, *plain, make_batch(1));
    save_checkpoint(bad, model2, plain.get(), sample_state);
    auto fresh = adam();
    CHECK(contains(refusal(bad, target, fresh.get()), "missing tensor optimizer/0.bias.m (this optimizer has"));
  }
  SUBCASE("optimizer state of the wrong shape") {
    edit_checkpoint(path, bad, [](safetensors_file& f) { f.tensors["optimizer/2.bias.v"] = zeros({4}); });
    auto fresh = adam();
    CHECK(contains(refusal(bad, target, fresh.get()),
                   "tensor optimizer/2.bias.v has shape (4) but the optimizer's state has shape (3)"));
  }
}

TEST_CASE("checkpoint of a slice: refused for save_checkpoint and load_checkpoint, which need the whole model") {
  scratch_dir dir{"checkpoint_model"};
  const std::string path = dir.file("run.safetensors");
  sequential model = tiny_model(1);
  save_checkpoint(path, model, nullptr, sample_state);
  sequential stage = model.slice(2, 3);
  CHECK(contains(error_of([&] { save_checkpoint(path, stage, nullptr, sample_state); }),
                 "the model is a slice starting at layer 2"));
  CHECK(contains(error_of([&] { load_checkpoint(path, stage, nullptr); }), "use load_checkpoint_slice"));
}

TEST_CASE("checkpoint into slices: each stage loads its own layers, then the stages train like the whole") {
  scratch_dir dir{"checkpoint_model"};
  const std::string path = dir.file("run.safetensors");
  // Layers: 0 linear:4:8, 1 relu, 2 linear:8:6, 3 relu, 4 linear:6:3.
  sequential model = tiny_model(1, "4-8-6-3");
  auto opt = adam();
  train_step(model, *opt, make_batch(1));
  train_step(model, *opt, make_batch(2));
  save_checkpoint(path, model, opt.get(), sample_state);

  // A 2-stage split of a freshly built model, each stage with its own fresh optimizer.
  const sequential fresh = tiny_model(77, "4-8-6-3");
  sequential stage0 = fresh.slice(0, 2), stage1 = fresh.slice(2, 5);
  auto opt0 = adam(), opt1 = adam();
  CHECK(load_checkpoint_slice(path, stage0, opt0.get()).batch_in_epoch == 7);
  CHECK(load_checkpoint_slice(path, stage1, opt1.get()).step == 2);
  CHECK(check_parameters(stage0, model, 0.0f, "stage0", false));
  CHECK(check_parameters(stage1, model, 0.0f, "stage1", false));
  CHECK(opt0->state().size() == 4);  // 0.weight, 0.bias: m and v
  CHECK(opt1->state().size() == 8);  // 2.* and 4.*
  CHECK(opt0->state().count("0.weight.m") == 1);
  CHECK(opt1->state().count("4.bias.v") == 1);
  CHECK(check_tensor(*opt1->state().at("2.weight.v"), *opt->state().at("2.weight.v"), 0.0f, "2.weight.v"));
  CHECK(opt0->steps() == 2);

  // One step through the stages (forward 0 then 1, backward 1 then 0) equals one step of the whole model.
  const batch b = make_batch(3);
  const mean_squared_error loss;
  sequential_cache c0, c1;
  const forward_context ctx{true, 2, 0};
  const tensor h = stage0.forward(b.x, c0, ctx);
  const tensor out = stage1.forward(h, c1, ctx);
  stage0.zero_grad();
  stage1.zero_grad();
  const tensor dh = stage1.backward(loss.compute_gradient(out, b.y), c1);
  stage0.backward(dh, c0, false);
  opt0->step(stage0.parameters());
  opt1->step(stage1.parameters());
  train_step(model, *opt, b);
  CHECK(check_parameters(stage0, model, 0.0f, "stage0", false));
  CHECK(check_parameters(stage1, model, 0.0f, "stage1", false));

  // A parameter-free slice loads nothing and needs nothing.
  sequential relu_only = fresh.slice(1, 2);
  auto opt_relu = adam();
  load_checkpoint_slice(path, relu_only, opt_relu.get());
  CHECK(opt_relu->state().empty());
}

TEST_CASE("checkpoint into a slice: refusals name the layer, both layer lists, or the tensor") {
  scratch_dir dir{"checkpoint_model"};
  const std::string path = dir.file("run.safetensors");
  const std::string bad = dir.file("bad.safetensors");
  sequential model = tiny_model(1, "4-8-6-3");
  save_checkpoint(path, model, nullptr, sample_state);

  sequential other = tiny_model(1, "4-8-5-3");  // layer 2 is linear:8:5, layer 4 linear:5:3
  sequential stage1 = other.slice(2, 5);
  const std::string message = error_of([&] { load_checkpoint_slice(path, stage1, nullptr); });
  CHECK(contains(message, "checkpoint " + path + ": holds a different model: layer 2 is linear:8:6 there but "
                          "linear:8:5 here; its layers are [linear:4:8;relu;linear:8:6;relu;linear:6:3] (5 layers), "
                          "this slice (layers 2..5) [linear:8:5;relu;linear:5:3] (3 layers)"));

  sequential longer = tiny_model(1, "4-8-6-3-3");
  sequential tail = longer.slice(4, 7);
  CHECK(contains(error_of([&] { load_checkpoint_slice(path, tail, nullptr); }),
                 "holds a model of 5 layers [linear:4:8;relu;linear:8:6;relu;linear:6:3] (5 layers), too few for "
                 "this slice (layers 4..7)"));

  // Another stage's tensors may be anything; this stage's must be there.
  sequential stage0 = model.slice(0, 2);
  edit_checkpoint(path, bad, [](safetensors_file& f) { f.tensors.erase("4.weight"); });
  CHECK_NOTHROW(load_checkpoint_slice(bad, stage0, nullptr));
  sequential stage_last = model.slice(2, 5);
  CHECK(contains(error_of([&] { load_checkpoint_slice(bad, stage_last, nullptr); }),
                 "checkpoint " + bad + ": missing tensor 4.weight"));
}

TEST_CASE("materialize_optimizer_state: zero state for every parameter, weights and steps untouched") {
  sequential model = tiny_model(1);
  const sequential before = model.clone();
  auto opt = adam();
  opt->set_steps(5);
  materialize_optimizer_state(*opt, model.parameters());
  CHECK(opt->steps() == 5);
  sequential copy = before.clone();
  CHECK(check_parameters(model, copy, 0.0f, "model"));
  const auto state = opt->state();
  CHECK(state.size() == 8);
  for (const auto& [key, t] : state) {
    INFO(key);
    CHECK(check_tensor(*t, zeros(shape_of(*t)), 0.0f, key));
  }
}

TEST_CASE("checkpoint of a model of blocks: hierarchical names, rebuilt from the file, loaded whole or by slice") {
  scratch_dir dir("ckpt_blocks");
  sequential model = sequential::from_layer_specs(
      {"linear:4:6", "residual[layernorm:6,linear:6:6,gelu]", "block[linear:6:3,tanh]"});
  model.initialize(21);
  save_checkpoint(dir.file("m.safetensors"), model, nullptr, training_state{});
  const checkpoint_info info = read_checkpoint_info(dir.file("m.safetensors"));
  CHECK(info.layer_specs == model.layer_specs());
  sequential rebuilt = sequential::from_layer_specs(info.layer_specs);
  load_checkpoint(dir.file("m.safetensors"), rebuilt, nullptr);
  auto expected = model.parameters(), got = rebuilt.parameters();
  REQUIRE(got.size() == expected.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    CAPTURE(expected[i].name);
    CHECK(got[i].name == expected[i].name);
    CHECK(check_tensor(*got[i].value, *expected[i].value, 0.0f, expected[i].name));
  }
  CHECK(expected[2].name == "1.0.gamma");
  CHECK(expected[4].name == "1.1.weight");
  sequential tail = sequential::from_layer_specs({info.layer_specs[1], info.layer_specs[2]}, 1);
  load_checkpoint_slice(dir.file("m.safetensors"), tail, nullptr);
  CHECK(check_tensor(*tail.parameters()[2].value, *model.parameters()[4].value, 0.0f, "1.1.weight"));
}

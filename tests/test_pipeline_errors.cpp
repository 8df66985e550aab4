// Bad input and failures inside stages: clear errors naming the stage and microbatch, no hang, no
// half-applied step, and a clean shutdown (the actor system exits).
#include <doctest/doctest.h>

#include <algorithm>

#include <chrono>
#include <limits>

#include "actors/pipeline.hpp"
#include "actors/pipeline_actors.hpp"
#include "equivalence.hpp"
#include "pipeline_test_models.hpp"
#include "tensor/tensor_memory.hpp"
#include "test_support.hpp"

using namespace ap;

namespace {

// Throws in forward for every sample at or after `bad_sample` (a layer that fails on one microbatch).
class faulty_layer final : public layer {
 public:
  explicit faulty_layer(std::size_t bad_sample) : bad_sample_(bad_sample) {}
  std::string describe() const override { return "Faulty"; }
  tensor forward(const tensor& x, layer_cache&, const forward_context& ctx) const override {
    if (ctx.first_sample + rows(x) > bad_sample_) throw std::runtime_error("faulty layer refuses this input");
    return x;
  }
  void backward_input(const tensor& dy, layer_cache&, tensor* dx) const override {
    if (!dx) return;
    float* pdx = accumulate_into(*dx, shape_of(dy), *this);
    for (std::size_t i = 0; i < dy.size(); ++i) pdx[i] += dy.data()[i];
  }
  std::unique_ptr<layer> clone() const override { return std::make_unique<faulty_layer>(*this); }
  std::string spec() const override { return "faulty"; }

 private:
  std::size_t bad_sample_;
};

// Destroys the pipeline: the actor system must exit within the limit (a hang is caught by CTest's timeout).
// Note: CAF 0.17.6's actor_system hangs when destroyed on a thread other than the one that built it, so
// this cannot run the destructor on a watchdog thread.
bool shuts_down_within(std::unique_ptr<pipeline> pipe, std::chrono::milliseconds limit) {
  const auto t0 = std::chrono::steady_clock::now();
  pipe.reset();
  return std::chrono::steady_clock::now() - t0 < limit;
}

}  // namespace

TEST_CASE("impossible configurations are refused when the pipeline is built") {
  const sequential model = test::nine_layer_model();
  pipeline_options o = test::pipeline_options_for(10);  // more stages than the 9 layers
  CHECK_THROWS_WITH_AS(pipeline(model, o), doctest::Contains("10 stages x 1 chunks need at least as many layers, the model has 9"),
                       std::invalid_argument);
  o.stages = 0;
  CHECK_THROWS_WITH_AS(pipeline(model, o), doctest::Contains("stages must be positive, got 0"), std::invalid_argument);
  o.stages = 2;
  o.microbatches = 0;
  CHECK_THROWS_WITH_AS(pipeline(model, o), doctest::Contains("microbatches must be positive, got 0"),
                       std::invalid_argument);
  o.microbatches = 4;
  o.layers_per_chunk = {4, 4};
  CHECK_THROWS_WITH_AS(pipeline(model, o), doctest::Contains("sum to 8 but the model has 9"), std::invalid_argument);
  o.layers_per_chunk = {};
  o.schedule = "no-such-schedule";
  CHECK_THROWS_AS(pipeline(model, o), std::invalid_argument);
}

TEST_CASE("more microbatches than samples is a clear error, and the pipeline still trains afterwards") {
  const dataset d = test::small_blobs(16);
  pipeline_options o = test::pipeline_options_for(2, 8);
  auto pipe = std::make_unique<pipeline>(test::nine_layer_model(), o);
  const tensor few_inputs = slice_rows(d.inputs, 0, 5), few_labels = slice_rows(d.labels, 0, 5);
  CHECK_THROWS_WITH_AS(pipe->train_step(few_inputs, few_labels, 0),
                       doctest::Contains("a batch of 5 samples cannot fill 8 microbatches"), pipeline_error);
  CHECK(std::isfinite(pipe->train_step(d.inputs, d.labels, 1)));
  CHECK(shuts_down_within(std::move(pipe), test::scaled(std::chrono::seconds(10))));
}

TEST_CASE("a layer that throws inside a stage fails the step, naming the stage and microbatch, and nothing is applied") {
  const dataset d = test::small_blobs(16);
  sequential model = test::nine_layer_model();
  sequential with_fault;
  for (std::size_t i = 0; i < model.size(); ++i) {
    if (i == 6) with_fault.add(std::make_unique<faulty_layer>(12));  // samples 12.. fail: microbatch 3 of 4
    with_fault.add(model.at(i).clone());
  }
  pipeline_options o = test::pipeline_options_for(3, 4, "1f1b");
  o.layers_per_chunk = {4, 3, 3};  // the faulty layer shares stage 1 with a Linear and a Tanh
  auto pipe = std::make_unique<pipeline>(with_fault, o);
  sequential before = pipe->gather_model();
  const auto [message, took] = test::failed_step(*pipe, d, 0);
  INFO(message);
  CHECK(message.find("stage 1 (chunk 1, layers 4..6: Linear(16->16) Tanh Faulty)") != std::string::npos);
  CHECK(message.find("forward microbatch 3") != std::string::npos);
  CHECK(message.find("faulty layer refuses this input") != std::string::npos);
  CHECK(took < test::scaled(5.0));
  sequential after = pipe->gather_model();
  test::check_same_parameters(before, after, 0.0f, "after a failed step");
  CHECK(shuts_down_within(std::move(pipe), test::scaled(std::chrono::seconds(10))));
}

TEST_CASE("inputs of the wrong width or dtype are refused before any stage runs, naming the layer and both") {
  const dataset d = test::small_blobs(8);
  pipeline_options o = test::pipeline_options_for(2, 2);
  pipeline pipe(test::nine_layer_model(), o);
  CHECK_THROWS_WITH_AS(pipe.train_step(zeros({8, 10}), d.labels, 0),
                       "step 0: inputs: layer 0 Linear(12->16) takes 12 features, got input of shape (8, 10)",
                       pipeline_error);
  CHECK_THROWS_WITH_AS(pipe.train_step(d.inputs.astype(dtype::bfloat16), d.labels, 0),
                       "step 0: inputs: layer 0 Linear(12->16) takes float32 input, got bfloat16 (8, 12)",
                       pipeline_error);
  // Nothing ran: the pipeline still trains, and its weights are those of the model it was given.
  sequential model = test::nine_layer_model();
  sequential gathered = pipe.gather_model();
  test::check_same_parameters(model, gathered, 0.0f, "after the refusals");
  CHECK(std::isfinite(pipe.train_step(d.inputs, d.labels, 1)));
}

TEST_CASE("labels out of range fail the step at the coordinator, naming the microbatch") {
  const dataset d = test::small_blobs(8);
  pipeline_options o = test::pipeline_options_for(2, 2);
  pipeline pipe(test::nine_layer_model(), o);
  tensor labels = d.labels;
  labels(6) = 9.0f;  // 4 classes: 9 is out of range, in microbatch 1
  CHECK_THROWS_WITH_AS(pipe.train_step(d.inputs, labels, 0), doctest::Contains("loss of microbatch 1"), pipeline_error);
}

TEST_CASE("a loss that is not finite fails the step at the coordinator, naming the step and the microbatch") {
  const dataset d = test::small_blobs(8);
  pipeline_options o = test::pipeline_options_for(2, 2);
  sequential model;  // Linear layers only: a NaN input reaches the loss (a ReLU could turn it into 0)
  model.add(make_layer("linear:12:8"));
  model.add(make_layer("linear:8:4"));
  model.initialize(3);
  pipeline pipe(model, o);
  tensor inputs = d.inputs;
  inputs.data()[6 * cols(inputs)] = std::numeric_limits<float>::quiet_NaN();  // row 6: in microbatch 1
  CHECK_THROWS_WITH_AS(pipe.train_step(inputs, d.labels, 3),
                       doctest::Contains("step 3: loss of microbatch 1: cross_entropy"), pipeline_error);
}

TEST_CASE("a diverging pipeline run stops naming the step and the microbatch of the largest loss") {
  const dataset d = test::small_blobs(48);
  pipeline_options o = test::pipeline_options_for(2, 2);
  o.optimizer.kind = "adam";
  o.optimizer.lr = 1e9f;
  pipeline pipe(test::nine_layer_model(), o);
  const std::string error = test::error_of([&] { train(pipe, d, dataset{}, test::small_train_config()); });
  CHECK_MESSAGE(test::contains(error, "the training diverge"), error);
  CHECK_MESSAGE(test::contains(error, "(largest in microbatch "), error);
  CHECK(error.rfind("step ", 0) == 0);
  CHECK(pipe.last_microbatch_losses().size() == 2);
}

TEST_CASE("a stage that waits on a peer longer than the timeout fails the step within bounded time") {
  const dataset d = test::small_blobs(8);
  sequential model;
  model.add(make_layer("linear:12:4"));
  model.add(make_layer("sleep:600:0"));  // stage 1 takes 600 ms per forward
  model.add(make_layer("relu"));
  model.initialize(1);
  pipeline_options o = test::pipeline_options_for(3, 2);
  o.timeout = std::chrono::milliseconds(200);
  auto pipe = std::make_unique<pipeline>(model, o);
  const auto [message, took] = test::failed_step(*pipe, d, 0);
  INFO(message);
  // Stage 2 waits for stage 1's forward from the start; stage 0 starts waiting for its backward a moment later,
  // so on a loaded machine (a sanitizer run) its 200 ms may expire first: either names what it waited for.
  const bool stage_2 = test::contains(message, "stage 2: waited 200 ms") &&
                       test::contains(message, "forward microbatch 0 of chunk 2");
  const bool stage_0 = test::contains(message, "stage 0: waited 200 ms") &&
                       test::contains(message, "backward microbatch 0 of chunk 0");
  CHECK((stage_2 || stage_0));
  CHECK(took < test::scaled(3.0));
  CHECK(shuts_down_within(std::move(pipe), test::scaled(std::chrono::seconds(10))));
}

// The one timer, armed at the first wait, must not fail a later wait that has
// not yet lasted the timeout, however long the step or the run (Note [one timer per retriever]).
TEST_CASE("many waits each shorter than the timeout pass although together they last longer") {
  const dataset d = test::small_blobs(8);
  sequential model;
  model.add(make_layer("linear:12:4"));
  model.add(make_layer("sleep:20:0"));  // stage 1 takes 20 ms per forward: the longest wait is stage 0's ~80 ms
  model.add(make_layer("relu"));
  model.initialize(1);
  pipeline_options o = test::pipeline_options_for(3, 4);
  o.timeout = test::scaled(std::chrono::milliseconds(150));
  pipeline pipe(model, o);
  // ~100 ms a step: the timer armed in step 0 fires during a later, short wait and must re-arm.
  for (std::uint64_t step = 0; step < 6; ++step) CHECK_NOTHROW(pipe.train_step(d.inputs, d.labels, step));
}

TEST_CASE("a task of an aborted step that reaches the processor after the abort is dropped") {
  // Note [tasks after an abort] in actors/processor.cpp: without the drop, the stale activation of step 0
  // would make step 1's forward of the same microbatch fail ("forward microbatch 0 twice").
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  sequential model = test::nine_layer_model();
  std::vector<sequential> slices;
  slices.push_back(model.slice(0, 9));
  auto worker = std::make_unique<stage_compute>(0, std::vector<int>{0}, std::move(slices), optimizer_config{});
  caf::scoped_actor self{sys};
  // The processor delivers to a sender_actor; this scoped actor stands in for it (Note [typed stage interfaces]).
  auto processor = spawn_processor(sys, processor_config{0, 1, 1, caf::actor_cast<sender_actor>(self), nullptr, dtype::float32, {}, nullptr},
                                   std::move(worker));
  const dataset d = test::small_blobs(4);
  self->send(processor, abort_atom::value, std::uint64_t{0});
  self->send(processor, run_forward{forward_task{0, 0, 0, 1, 0, d.inputs}});
  self->send(processor, run_forward{forward_task{1, 0, 0, 1, 0, d.inputs}});
  // We are both the retriever (task_done) and the sender (the step-1 output): collect both dones.
  std::vector<task_done> done;
  bool silent = false;
  while (done.size() < 2 && !silent)
    self->receive([&](task_done& t) { done.push_back(t); }, [&](deliver_forward&) {},
                  caf::after(test::scaled(std::chrono::seconds(10))) >> [&] { silent = true; });
  REQUIRE(done.size() == 2);
  CHECK(done[0].step == 0);
  CHECK(done[0].error.empty());
  CHECK(done[1].step == 1);
  CHECK(done[1].error.empty());
  CHECK(done[1].peak_stash == 1);
  caf::anon_send_exit(processor, caf::exit_reason::user_shutdown);
}

TEST_CASE("the pipeline keeps no idle gradients, and the model it gathers trains as any (Note [one copy of the gradients])") {
  const dataset d = test::small_blobs(8);
  pipeline_options o = test::pipeline_options_for(2, 2);
  pipeline pipe(test::nine_layer_model(), o);
  CHECK(std::isfinite(pipe.train_step(d.inputs, d.labels, 0)));
  sequential gathered = pipe.gather_model();
  for (const parameter& p : gathered.parameters()) {
    CAPTURE(p.name);
    CHECK(p.grad->shape() == p.value->shape());
    CHECK(std::all_of(p.grad->begin(), p.grad->end(), [](float g) { return g == 0.0f; }));
  }
  // One step of the gathered model alone: its gradients fill, and the pipeline's next step is unaffected.
  sequential_cache cache;
  const tensor y = gathered.forward(d.inputs, cache, forward_context{true, 0, 0});
  gathered.backward(y, cache);
  bool some = false;
  for (const parameter& p : gathered.parameters())
    some = some || std::any_of(p.grad->begin(), p.grad->end(), [](float g) { return g != 0.0f; });
  CHECK(some);
  CHECK(std::isfinite(pipe.train_step(d.inputs, d.labels, 1)));
  sequential released = test::nine_layer_model();
  released.release_gradients();
  for (const parameter& p : released.parameters()) CHECK(p.grad->dimension() == 0);
  sequential copy = released.clone();  // a clone of a released model trains: it has its gradients again
  for (const parameter& p : copy.parameters()) CHECK(p.grad->shape() == p.value->shape());
  released.with_gradients();
  for (const parameter& p : released.parameters()) CHECK(p.grad->shape() == p.value->shape());
}

TEST_CASE("the pipeline's own model holds no weights while the stages train, and gathers, saves and loads as before "
          "(Note [weights on demand])") {
  // The model's weights and gradients: 784 x 512 + 512 + 512 x 10 + 10 parameters, 8 bytes each in the stages.
  const sequential model = sequential::from_spec("784-512-10", sequential_options{"relu", 1});
  const std::uint64_t parameters = 784 * 512 + 512 + 512 * 10 + 10;
  const dataset d = make_blobs(8, 784, 10, 3);
  pipeline_options o = test::pipeline_options_for(2, 2);
  const std::uint64_t before = tensor_bytes_in_use();
  pipeline pipe(model, o);
  const std::uint64_t built = tensor_bytes_in_use() - before;
  CHECK(built >= 8 * parameters);       // the stages' weights and gradients
  CHECK(built < 8 * parameters + 4 * parameters / 2);  // and no third copy of the weights (it was 12 a parameter)
  CHECK(std::isfinite(pipe.train_step(d.inputs, d.labels, 0)));
  sequential gathered = pipe.gather_model();  // weights come back for the gather, trained
  sequential fresh = model.clone();
  CHECK(max_relative_difference(*gathered.parameters()[0].value, *fresh.parameters()[0].value) > 0.0f);
  CHECK(pipe.predict(d.inputs).shape() == shape_t{8, 10});
  test::scratch_dir dir{"weights_on_demand"};
  const std::string path = dir.file("pipe.safetensors");
  pipe.save_checkpoint(path, training_state{1, 0, 0, 0, "784-512-10"});
  CHECK(std::isfinite(pipe.train_step(d.inputs, d.labels, 1)));
  pipe.load_checkpoint(path);
  sequential reloaded = pipe.gather_model();
  for (std::size_t i = 0; i < gathered.parameters().size(); ++i)
    CHECK(*reloaded.parameters()[i].value == *gathered.parameters()[i].value);

  sequential released = model.clone();
  released.release_weights();
  CHECK(released.weights_released());
  for (const parameter& p : released.parameters()) CHECK(p.value->dimension() == 0);
  CHECK_THROWS_WITH_AS(released.clone(), doctest::Contains("the model's weights were let go"), std::logic_error);
  CHECK_THROWS_WITH_AS(released.forward(d.inputs), doctest::Contains("sequential::forward"), std::logic_error);
  released.with_weights();
  const std::vector<parameter> params = released.parameters(), originals = fresh.parameters();
  for (std::size_t i = 0; i < params.size(); ++i) {
    CHECK(params[i].value->shape() == originals[i].value->shape());
    CHECK(params[i].grad->shape() == originals[i].value->shape());
  }
}

// Pipeline training equals single-process training: same weights, same data, every schedule and split.
#include <doctest/doctest.h>

#include "actors/pipeline.hpp"
#include "equivalence.hpp"
#include "pipeline_test_models.hpp"
#include "test_support.hpp"

using namespace ap;
using test::run_result;

namespace {

constexpr int steps = 3;

using model_factory = sequential (*)(std::uint64_t);

run_result train_single(const dataset& d, const optimizer_config& opt, model_factory make = test::nine_layer_model,
                        int count = steps) {
  run_result r{make(7), {}};
  local_runner runner(r.model, opt);
  for (int s = 0; s < count; ++s) r.losses.push_back(runner.train_step(d.inputs, d.labels, s));
  return r;
}

run_result train_pipeline(const dataset& d, const pipeline_options& o, model_factory make = test::nine_layer_model,
                          int count = steps) {
  pipeline pipe(make(7), o);
  run_result r{sequential{}, {}};
  for (int s = 0; s < count; ++s) r.losses.push_back(pipe.train_step(d.inputs, d.labels, s));
  r.model = pipe.gather_model();
  return r;
}

}  // namespace

TEST_CASE("GPipe and 1F1B on 1..4 stages with 1..8 microbatches, unequal splits, equal single-process training") {
  const dataset d = test::small_blobs(30);  // 30 samples: 4 microbatches of 8,8,7,7; 8 of 4,4,4,4,4,4,3,3
  optimizer_config opt;
  opt.kind = "adam";
  opt.lr = 0.01f;
  run_result single = train_single(d, opt);
  for (const std::string sched : {"gpipe", "1f1b"})
    for (int stages = 1; stages <= 4; ++stages)
      for (int m : {1, 2, 3, 4, 8}) {
        pipeline_options o = test::pipeline_options_for(stages, m, sched, 1, opt);
        run_result piped = train_pipeline(d, o);
        test::check_same_run(piped, single, 1e-5f, 1e-5, sched + " p=" + std::to_string(stages) + " m=" + std::to_string(m));
      }
}

TEST_CASE("zero-bubble ZB-H1 and interleaved 1F1B equal single-process training") {
  const dataset d = test::small_blobs(32);
  optimizer_config opt;
  opt.kind = "sgd";
  opt.lr = 0.1f;
  opt.momentum = 0.9f;
  run_result single = train_single(d, opt);
  for (int stages = 1; stages <= 4; ++stages)
    for (int m : {1, 3, 4, 8}) {
      pipeline_options o = test::pipeline_options_for(stages, m, "zb-h1", 1, opt);
      run_result piped = train_pipeline(d, o);
      test::check_same_run(piped, single, 1e-5f, 1e-5, "zb-h1 p=" + std::to_string(stages) + " m=" + std::to_string(m));
    }
  for (int stages : {2, 4})
    for (int m : {4, 8}) {
      pipeline_options o = test::pipeline_options_for(stages, m, "interleaved", 2, opt);
      run_result piped = train_pipeline(d, o);
      test::check_same_run(piped, single, 1e-5f, 1e-5, "interleaved v=2 p=" + std::to_string(stages) + " m=" + std::to_string(m));
    }
}

TEST_CASE("a warmup-cosine lr schedule trains in a pipeline as in one process, every stage at the same lr") {
  // Each stage's optimizer reads the schedule at its own step count (Note [lr from the optimizer's steps]).
  const dataset d = test::small_blobs(30);
  for (const std::string kind : {"adamw", "sgd"}) {
    optimizer_config opt;
    opt.kind = kind;
    opt.lr = kind == "sgd" ? 0.1f : 0.01f;
    opt.momentum = kind == "sgd" ? 0.9f : 0.0f;
    opt.weight_decay = 0.01f;
    opt.schedule.kind = "cosine";
    opt.schedule.warmup_steps = 2;
    opt.schedule.decay_steps = 5;
    opt.schedule.min_lr = opt.lr / 10;
    constexpr int count = 6;  // two warmup steps, the decay, and a step at min_lr
    run_result single = train_single(d, opt, test::nine_layer_model, count);
    optimizer_config constant = opt;
    constant.schedule = lr_schedule{};
    run_result unscheduled = train_single(d, constant, test::nine_layer_model, count);
    CHECK_MESSAGE(!test::check_parameters(unscheduled.model, single.model, 1e-4f, "without the schedule"),
                  "the schedule changes the run");
    for (const std::string sched : {"1f1b", "interleaved"}) {
      pipeline_options o = test::pipeline_options_for(2, 4, sched, sched == "interleaved" ? 2 : 1, opt);
      run_result piped = train_pipeline(d, o, test::nine_layer_model, count);
      test::check_same_run(piped, single, 1e-5f, 1e-5, kind + " warmup-cosine, " + sched);
    }
  }
}

TEST_CASE("a model of residual blocks: every schedule equals single-process training") {
  const dataset d = test::small_blobs(24);
  optimizer_config opt;
  opt.kind = "adam";
  opt.lr = 0.01f;
  run_result single = train_single(d, opt, test::residual_block_model);
  struct setup { std::string schedule; int stages, chunks, microbatches; };
  for (const setup& u : {setup{"gpipe", 2, 1, 4}, setup{"1f1b", 3, 1, 3}, setup{"1f1b", 6, 1, 8},
                         setup{"zb-h1", 2, 1, 4}, setup{"zb-h1", 4, 1, 3}, setup{"interleaved", 2, 2, 4},
                         setup{"interleaved", 3, 2, 6}}) {
    pipeline_options o = test::pipeline_options_for(u.stages, u.microbatches, u.schedule, u.chunks, opt);
    run_result piped = train_pipeline(d, o, test::residual_block_model);
    CHECK(piped.model.layer_specs() == single.model.layer_specs());
    test::check_same_run(piped, single, 1e-5f, 1e-5,
                         "residual blocks, " + u.schedule + " p=" + std::to_string(u.stages) + " v=" +
                             std::to_string(u.chunks) + " m=" + std::to_string(u.microbatches));
  }
}

TEST_CASE("rank 3: (batch, sequence, features) inputs and mse targets (batch, sequence, out) train in a pipeline as in one process") {
  // 10 sequences of 5 positions: 3 microbatches of 4, 3, 3 whole sequences.
  dataset d;
  d.inputs = test::random_tensor({10, 5, 6}, 21);
  d.labels = test::random_tensor({10, 5, 3}, 22);
  const model_factory make = [](std::uint64_t seed) {
    sequential m = sequential::from_layer_specs({"linear:6:8", "gelu", "residual[layernorm:8,linear:8:8,tanh]",
                                                 "dropout:0.2:3", "linear:8:8", "relu", "linear:8:3"});
    m.initialize(seed);
    return m;
  };
  optimizer_config opt;
  opt.kind = "adam";
  opt.lr = 0.01f;
  run_result single{make(7), {}};
  local_runner runner(single.model, opt, "mse");
  for (int s = 0; s < steps; ++s) single.losses.push_back(runner.train_step(d.inputs, d.labels, s));
  CHECK(shape_of(runner.predict(d.inputs)) == shape_t{10, 5, 3});
  for (const std::string sched : {"1f1b", "zb-h1"}) {
    pipeline_options o = test::pipeline_options_for(2, 3, sched, 1, opt);
    o.loss = "mse";
    pipeline pipe(make(7), o);
    run_result piped{sequential{}, {}};
    for (int s = 0; s < steps; ++s) piped.losses.push_back(pipe.train_step(d.inputs, d.labels, s));
    CHECK(shape_of(pipe.predict(d.inputs)) == shape_t{10, 5, 3});
    piped.model = pipe.gather_model();
    test::check_same_run(piped, single, 1e-5f, 1e-5, "rank 3, " + sched + " p=2 m=3");
  }
}

TEST_CASE("an explicit partition trains like a uniform one") {
  const dataset d = test::small_blobs(16);
  optimizer_config opt;
  run_result single = train_single(d, opt);
  pipeline_options o = test::pipeline_options_for(3, 4, "1f1b", 1, opt);
  o.layers_per_chunk = {1, 6, 2};
  pipeline pipe(test::nine_layer_model(), o);
  CHECK(pipe.chunk_ranges() == std::vector<layer_range>{{0, 1}, {1, 7}, {7, 9}});
  run_result piped{sequential{}, {}};
  for (int s = 0; s < steps; ++s) piped.losses.push_back(pipe.train_step(d.inputs, d.labels, s));
  piped.model = pipe.gather_model();
  test::check_same_run(piped, single, 1e-5f, 1e-5, "explicit 1,6,2");
}

TEST_CASE("1F1B holds at most min(m, p - s) activations on stage s, GPipe holds all m") {
  const dataset d = test::small_blobs(32);
  for (const std::string sched : {"1f1b", "gpipe"}) {
    pipeline_options o = test::pipeline_options_for(4, 8, sched);
    pipeline pipe(test::nine_layer_model(), o);
    pipe.train_step(d.inputs, d.labels, 0);
    const auto peak = pipe.last_peak_stash();
    REQUIRE(peak.size() == 4);
    for (int s = 0; s < 4; ++s) {
      INFO(sched << " stage " << s);
      CHECK(peak[s] == (sched == "gpipe" ? 8 : std::min(8, 4 - s)));
    }
  }
}

TEST_CASE("stage_info gives half-open layer ranges with round-robin chunks") {
  const stage_info a = get_stage_info(24, 4, 1);
  CHECK_FALSE(a.is_first_stage);
  CHECK_FALSE(a.is_last_stage);
  CHECK(a.layer_ranges_per_chunk == std::vector<layer_range>{{6, 12}});
  const stage_info b = get_stage_info(24, 4, 3, 2);  // 8 chunks of 3 layers; stage 3 holds chunks 3 and 7
  CHECK(b.is_last_stage);
  CHECK(b.chunks == std::vector<int>{3, 7});
  CHECK(b.layer_ranges_per_chunk == std::vector<layer_range>{{9, 12}, {21, 24}});
  const stage_info c = get_stage_info(10, 4, 0);  // remainder to the first stages: 3,3,2,2
  CHECK(c.is_first_stage);
  CHECK(c.layer_ranges_per_chunk == std::vector<layer_range>{{0, 3}});
  CHECK(get_stage_info(10, 4, 3).layer_ranges_per_chunk == std::vector<layer_range>{{8, 10}});
  CHECK_THROWS_WITH_AS(get_stage_info(3, 4, 0), doctest::Contains("cannot split 3 layers into 4 chunks"),
                       std::invalid_argument);
}

TEST_CASE("sync-backward (caches joined, one whole-batch backward per stage) equals single-process training") {
  optimizer_config opt;
  opt.kind = "adam";
  opt.lr = 0.01f;
  const dataset d = test::small_blobs(30);  // unequal microbatches: the joined rows must be the batch's, in order
  run_result single = train_single(d, opt);
  for (int stages = 1; stages <= 4; ++stages)
    for (int m : {1, 3, 4, 8}) {
      pipeline_options o = test::pipeline_options_for(stages, m, "sync-backward", 1, opt);
      run_result piped = train_pipeline(d, o);
      test::check_same_run(piped, single, 1e-5f, 1e-5, "sync-backward p=" + std::to_string(stages) + " m=" + std::to_string(m));
    }
  const dataset r = test::small_blobs(24);
  run_result single_blocks = train_single(r, opt, test::residual_block_model);
  pipeline_options o = test::pipeline_options_for(3, 4, "sync-backward", 1, opt);
  run_result piped = train_pipeline(r, o, test::residual_block_model);
  test::check_same_run(piped, single_blocks, 1e-5f, 1e-5, "residual blocks, sync-backward p=3 m=4");
}

// One training step for every mode: data_tensor_runner (D x T without a pipeline) runs the stage code every pipeline
// runs (stage_compute), so it gives the bits of a pipeline with the same D and T and one microbatch, in
// float32 and in bfloat16 (Note [compute dtype], the rounding between layers included): on one stage, and on
// two where the split does not change what tensor parallelism pairs (T = 1; with T > 1 each chunk pairs its
// own Linear layers, Note [tensor-parallel stage], so the shards and their rounding differ); and one process's
// results within the usual tolerance (in bfloat16, loosely: the replicas' and ranks' sums round differently).
#include <doctest/doctest.h>

#include "actors/data_parallel_pipeline.hpp"
#include "pipeline_test_models.hpp"
#include "test_support.hpp"
#include "tensor/compute.hpp"
#include "training/data_tensor_runner.hpp"

using namespace ap;
using namespace ap::test;

namespace {

pipeline_options one_microbatch(int stages, int T, dtype type, float clip, int threads) {
  pipeline_options o = pipeline_options_for(stages, 1, "1f1b", 1, adam_optimizer());
  o.tensor_parallel = T;
  o.compute_dtype = type;
  o.clip_grad_norm = clip;
  o.threads = threads;
  return o;
}

sequential model_in(dtype type) {
  sequential m = linear_pairs_model(7);
  m.set_compute_dtype(type);
  return m;
}

// Every rank on `threads` intra-op threads (Note [cores per rank]): the same in every run compared bit for bit.
void check_mesh_equals_pipelines(int D, int T, dtype type, float clip, int threads = 1) {
  CAPTURE(threads);
  CAPTURE(D);
  CAPTURE(T);
  CAPTURE(dtype_name(type));
  CAPTURE(clip);
  const dataset d = small_blobs(40);
  sequential whole = model_in(type), reference = model_in(type);
  data_tensor_options m{D, T, clip};
  m.threads = threads;
  data_tensor_runner mesh(whole, adam_optimizer(), "cross_entropy", m);
  set_compute_threads(1);
  local_runner local(reference, adam_optimizer(), "cross_entropy", clip);
  std::vector<std::unique_ptr<data_parallel_pipeline>> pipelines;
  for (int stages : {1, 2})
    pipelines.push_back(std::make_unique<data_parallel_pipeline>(model_in(type), one_microbatch(stages, T, type, clip, threads), D));
  const bool fp32 = type == dtype::float32;
  for (std::uint64_t s = 0; s < 3; ++s) {
    const float got = mesh.train_step(d.inputs, d.labels, s);
    for (std::size_t p = 0; p < pipelines.size(); ++p) {
      const float piped = pipelines[p]->train_step(d.inputs, d.labels, s);
      if (p == 0 || T == 1) CHECK(piped == got);  // the same bits
      else CHECK(piped == doctest::Approx(got).epsilon(fp32 ? 1e-5 : 1e-2));
    }
    const float expected = local.train_step(d.inputs, d.labels, s);
    CHECK(got == doctest::Approx(expected).epsilon(fp32 ? 1e-5 : 1e-2));
  }
  const tensor out = mesh.predict(d.inputs);
  for (std::size_t p = 0; p < pipelines.size(); ++p) {
    sequential gathered = pipelines[p]->first().gather_model();
    const bool bitwise = p == 0 || T == 1;
    check_same_parameters(gathered, whole, bitwise ? 0.0f : (fp32 ? 1e-5f : 0.1f), "mesh vs pipeline");
    if (bitwise) CHECK(check_close(pipelines[p]->predict(d.inputs), out, 0.0, 0.0, "outputs"));
  }
  check_same_parameters(whole, reference, fp32 ? 1e-5f : 0.1f, "mesh vs one process");
}

}  // namespace

TEST_CASE("D x T without stages gives a one-microbatch pipeline's bits, float32 and bfloat16") {
  for (dtype type : {dtype::float32, dtype::bfloat16})
    for (auto [D, T] : std::vector<std::pair<int, int>>{{2, 1}, {1, 2}, {2, 2}}) check_mesh_equals_pipelines(D, T, type, 0.0f);
}

TEST_CASE("D x T without stages clips like the pipeline: the same bits") {
  check_mesh_equals_pipelines(2, 2, dtype::float32, 0.5f);
  check_mesh_equals_pipelines(2, 1, dtype::bfloat16, 0.5f);
}

TEST_CASE("one replica of one rank is the stage code on one thread: one process's result") {
  check_mesh_equals_pipelines(1, 1, dtype::bfloat16, 0.0f);
}

TEST_CASE("ranks of 2 intra-op threads each: the mesh still gives the pipelines' bits") {
  check_mesh_equals_pipelines(2, 1, dtype::float32, 0.0f, 2);
  check_mesh_equals_pipelines(1, 2, dtype::bfloat16, 0.0f, 2);
  check_mesh_equals_pipelines(1, 1, dtype::float32, 0.0f, 2);
}

TEST_CASE("every schedule, and D x P x T, with 2 intra-op threads per rank equals one process") {
  const dataset d = small_blobs(40);
  struct shape {
    const char* schedule;
    int D, P, T;
  };
  for (const shape& s : {shape{"gpipe", 1, 2, 1}, shape{"1f1b", 1, 2, 1}, shape{"zb-h1", 1, 2, 1},
                         shape{"interleaved", 1, 2, 1}, shape{"sync-backward", 1, 2, 1}, shape{"1f1b", 2, 2, 2}}) {
    CAPTURE(s.schedule);
    CAPTURE(s.D);
    CAPTURE(s.T);
    pipeline_options o = one_microbatch(s.P, s.T, dtype::float32, 0.0f, 2);
    o.schedule = s.schedule;
    o.microbatches = 4;
    o.chunks_per_stage = std::string(s.schedule) == "interleaved" ? 2 : 1;
    sequential reference = model_in(dtype::float32);
    set_compute_threads(1);
    local_runner local(reference, adam_optimizer(), "cross_entropy");
    data_parallel_pipeline piped(model_in(dtype::float32), o, s.D);
    for (const auto& c : piped.cores()) CHECK(c.threads == 2);
    for (std::uint64_t step = 0; step < 2; ++step)
      CHECK(piped.train_step(d.inputs, d.labels, step) ==
            doctest::Approx(local.train_step(d.inputs, d.labels, step)).epsilon(1e-5));
    sequential gathered = piped.first().gather_model();
    check_same_parameters(gathered, reference, 1e-5f, "2 threads per rank vs one process");
  }
}

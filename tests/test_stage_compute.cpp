// A stage's tensor-parallel ranks without actors (Note [tensor-parallel stage]): lockstep_threads runs every
// rank and returns each one's failure; stage_compute at T = 2 and 4 computes what one stage_rank computes
// (outputs, dx, gradients after the optimizer step, whole state), rebuilds itself after a failed action, and
// its data-parallel replicas (Note [data-parallel stage]) commit together or not at all. ThreadSanitizer runs it.
#include <doctest/doctest.h>

#include <atomic>
#include <stdexcept>
#include <thread>

#include "checkpoint/checkpoint.hpp"
#include "collective/local_group.hpp"
#include "stage/stage_compute.hpp"
#include "pipeline_test_models.hpp"
#include "test_support.hpp"

using namespace ap;
using namespace ap::test;

namespace {

std::vector<sequential> chunk_of(const sequential& model) {
  std::vector<sequential> slices;
  slices.push_back(model.slice(0, model.size()));
  return slices;
}

}  // namespace

TEST_CASE("lockstep_threads runs every rank at once, many times, and returns each rank's exception") {
  lockstep_threads threads(3);
  std::atomic<int> calls{0};
  for (int round = 0; round < 200; ++round) {
    const auto errors = threads.run([&](int) { ++calls; });
    for (const auto& e : errors) CHECK_FALSE(e);
  }
  CHECK(calls == 600);
  const auto errors = threads.run([](int r) {
    if (r == 2) throw std::runtime_error("rank 2 fails");
  });
  CHECK_FALSE(errors[0]);
  CHECK_FALSE(errors[1]);
  REQUIRE(errors[2]);
  CHECK(error_of([&] { std::rethrow_exception(errors[2]); }) == "rank 2 fails");
  CHECK(contains(error_of([] { lockstep_threads none(0); }), "at least 1"));
}

TEST_CASE("a stage of T = 2 and 4 lockstep ranks computes what one worker computes, and its state is whole") {
  const dataset d = small_blobs(8);
  for (int T : {2, 4}) {
    CAPTURE(T);
    const sequential model = linear_pairs_model();
    stage_rank whole(0, {0}, chunk_of(model), adam_optimizer());
    stage_compute split(0, {0}, chunk_of(model), adam_optimizer(), T);
    CHECK(split.split_layers() == "0 column_linear:12:16, 2 row_linear:16:24, 4 column_linear:24:16, 6 row_linear:16:32, "
                                 "8 column_linear:32:16, 10 row_linear:16:4");
    for (int step = 0; step < 2; ++step) {
      const tensor y = whole.forward(step, 0, 0, 0, d.inputs), ys = split.forward(step, 0, 0, 0, d.inputs);
      CHECK(check_close(ys, y, 1e-5, 1e-5, "output"));
      const tensor dy = y;  // any gradient will do
      CHECK(check_close(split.backward_input(0, 0, dy), whole.backward_input(0, 0, dy), 1e-5, 1e-5, "dx"));
      whole.backward_weight(0, 0);
      split.backward_weight(0, 0);
      whole.apply_optimizer();
      split.apply_optimizer();
    }
    const stage_state a = whole.export_state(), b = split.export_state();
    REQUIRE(a.tensors.names == b.tensors.names);
    CHECK(b.optimizer_steps == 2);
    for (std::size_t i = 0; i < a.tensors.names.size(); ++i)
      CHECK(check_close(b.tensors.values[i], a.tensors.values[i], 1e-5, 1e-5, a.tensors.names[i]));
    // The whole state goes back in: a fresh split stage takes it and continues like the worker.
    stage_compute other(0, {0}, chunk_of(linear_pairs_model(99)), adam_optimizer(), T);
    other.import_state(a);
    CHECK(check_close(other.forward(2, 0, 0, 0, d.inputs), whole.forward(2, 0, 0, 0, d.inputs), 1e-5, 1e-5, "after import"));
  }
}

TEST_CASE("a failed action aborts the ranks' group, the stage rebuilds it and the next action runs") {
  const dataset d = small_blobs(8);
  stage_compute split(0, {0}, chunk_of(linear_pairs_model()), adam_optimizer(), 2);
  const tensor wrong = tensor::from_shape({8, 11});
  CHECK(contains(error_of([&] { split.forward(0, 0, 0, 0, wrong); }), "tensor-parallel rank 0"));
  split.abort();
  stage_rank whole(0, {0}, chunk_of(linear_pairs_model()), adam_optimizer());
  CHECK(check_close(split.forward(1, 0, 0, 0, d.inputs), whole.forward(1, 0, 0, 0, d.inputs), 1e-5, 1e-5, "after"));
}

TEST_CASE("a replica destroyed with its reduction in flight aborts it first (Note [reductions before the gradients go]): its peer's step fails at once, naming it") {
  const dataset d = small_blobs(8);
  const tensor x0 = slice_rows(d.inputs, 0, 4), x1 = slice_rows(d.inputs, 4, 8);
  // Longer than the test: only the abort can end the peer's step in time.
  local_group group("data-parallel stage 0", 2, std::chrono::milliseconds(60000));
  std::vector<std::unique_ptr<stage_compute>> replicas;
  for (int r = 0; r < 2; ++r) {
    replicas.push_back(std::make_unique<stage_compute>(0, std::vector<int>{0}, chunk_of(linear_pairs_model()),
                                                        adam_optimizer(), 1, std::chrono::milliseconds(60000)));
    replicas.back()->join_data_parallel({std::shared_ptr<process_group>(group.member(r))}, r);
  }
  replicas[0]->backward(0, 0, replicas[0]->forward(0, 0, 0, 0, x0));
  replicas[0]->reduce_gradients(0);  // waits for replica 1, and would write into replica 0's gradients
  replicas[0].reset();                // its actors stopped mid-step
  stage_compute& peer = *replicas[1];
  peer.backward(0, 0, peer.forward(0, 0, 0, 4, x1));
  std::string message;
  const double took = seconds_of([&] {
    message = error_of([&] {
      peer.reduce_gradients(0);
      peer.apply_optimizer();
    });
  });
  CHECK(contains(message, "replica 0 stage 0 stopped"));
  CHECK(took < scaled(10.0));
}

TEST_CASE("data-parallel replicas of a stage sum their gradients and commit together, an abort fails the commit") {
  const dataset d = small_blobs(8);
  const tensor x0 = slice_rows(d.inputs, 0, 4), x1 = slice_rows(d.inputs, 4, 8);
  // The reference: one worker on the whole batch (loss rows = 8 in both: the gradients are summed).
  stage_rank whole(0, {0}, chunk_of(linear_pairs_model()), adam_optimizer());
  const tensor y = whole.forward(0, 0, 0, 0, d.inputs);
  whole.backward(0, 0, y);
  whole.apply_optimizer();

  // Two replicas of a stage of T = 2 ranks: one data-parallel group per rank.
  local_group rank0("data-parallel stage 0 rank 0", 2), rank1("data-parallel stage 0 rank 1", 2);
  std::vector<std::unique_ptr<stage_compute>> replicas;
  for (int d = 0; d < 2; ++d) {
    replicas.push_back(std::make_unique<stage_compute>(0, std::vector<int>{0}, chunk_of(linear_pairs_model()),
                                                        adam_optimizer(), 2));
    replicas.back()->join_data_parallel({std::shared_ptr<process_group>(rank0.member(d)),
                                         std::shared_ptr<process_group>(rank1.member(d))}, d);
  }
  CHECK(contains(error_of([&] { replicas[0]->join_data_parallel({}, 0); }), "0 data-parallel members for 2"));
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      stage_compute& s = *replicas[static_cast<std::size_t>(r)];
      const tensor yr = s.forward(0, 0, 0, r * 4, r == 0 ? x0 : x1);
      s.backward(0, 0, yr);
      s.reduce_gradients(0);
      s.apply_optimizer();
    });
  for (auto& t : threads) t.join();
  const stage_state a = whole.export_state();
  for (auto& r : replicas) {
    const stage_state b = r->export_state();
    for (std::size_t i = 0; i < a.tensors.names.size(); ++i)
      CHECK(check_close(b.tensors.values[i], a.tensors.values[i], 1e-5, 1e-5, a.tensors.names[i]));
  }
  // Replica 1 abandons the next step: replica 0's commit fails at once and changes nothing.
  const stage_state before = replicas[0]->export_state();
  replicas[0]->backward(0, 0, replicas[0]->forward(1, 0, 0, 0, x0));
  replicas[1]->abort();
  CHECK(contains(error_of([&] { replicas[0]->apply_optimizer(); }), "abandoned its step"));
  const stage_state after = replicas[0]->export_state();
  for (std::size_t i = 0; i < before.tensors.names.size(); ++i)
    if (before.tensors.names[i].rfind(checkpoint_optimizer_prefix, 0) != 0)
      CHECK(check_close(after.tensors.values[i], before.tensors.values[i], 0, 0, before.tensors.names[i]));
}

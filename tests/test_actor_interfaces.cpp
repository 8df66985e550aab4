// The typed stage interfaces (actors/stage_interfaces.hpp, Note [typed stage interfaces]) at work: a stage
// spawned as typed actors takes its tasks through an untyped endpoint, as the communicator holds it, answers
// the processor's task_done and reports to whoever began the step through cast handles, and an untyped holder
// that sends a role a message outside its interface gets an error while the actor lives on.
#include <doctest/doctest.h>

#include <chrono>
#include <type_traits>

#include <caf/all.hpp>

#include "actors/pipeline_actors.hpp"
#include "actors/scheduler_config.hpp"
#include "actors/stage_spawner.hpp"
#include "pipeline_test_models.hpp"
#include "tensor/compute.hpp"
#include "test_support.hpp"

using namespace ap;

namespace {

static_assert(std::is_same_v<decltype(stage_actors::retriever), retriever_actor>);
static_assert(std::is_same_v<decltype(stage_actors::processor), processor_actor>);
static_assert(std::is_same_v<decltype(stage_actors::sender), sender_actor>);

// One stage holding the whole nine-layer model, running one microbatch: F0 then B0.
stage_setup one_stage() {
  stage_setup setup;
  setup.stage = 0;
  setup.stages = 1;
  setup.total_chunks = 1;
  setup.chunk_ids = {0};
  setup.slices.push_back(test::nine_layer_model().slice(0, 9));
  setup.actions = make_schedule("1f1b", 1, 1).per_stage.at(0);
  return setup;
}

}  // namespace

TEST_CASE("a stage of typed actors takes tasks through an untyped endpoint and reports to the actor that began the step") {
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};  // the coordinator, and the endpoint of its rank
  const stage_actors a = spawn_stage(sys, one_stage());
  const auto limit = test::scaled(std::chrono::milliseconds(10000));
  // The communicator's endpoints: rank 0 is the stage's retriever, rank 1 the coordinator, both untyped.
  const std::vector<caf::actor> endpoints{caf::actor_cast<caf::actor>(a.retriever), caf::actor_cast<caf::actor>(self)};
  std::string failure = "no answer";
  self->request(a.sender, limit, setup_atom::value, endpoints, std::vector<std::string>{})
      .receive([&](ok_atom) { failure.clear(); }, [&](caf::error& e) { failure = caf::to_string(e); });
  REQUIRE(failure.empty());

  const dataset d = test::small_blobs(4);
  caf::anon_send(endpoints[0], forward_task{0, 0, 0, 1, 0, d.inputs});  // before begin: held until the step starts
  self->send(a.retriever, begin_atom::value, std::uint64_t{0});
  forward_task out;
  bool got_output = false;
  self->receive([&](forward_task& t) { out = std::move(t), got_output = true; },
                caf::after(limit) >> [] {});
  REQUIRE(got_output);
  CHECK(out.step == 0);
  CHECK(out.microbatch == 0);
  CHECK(out.chunk == 1);   // past the last chunk: the coordinator's
  CHECK(out.source == 0);  // from stage 0's sender
  CHECK(rows(out.data) == 4);

  caf::anon_send(endpoints[0], backward_task{0, 0, 0, 1, 0, tensor::from_shape(out.data.shape())});
  stage_done done;
  bool got_done = false;
  failure.clear();
  self->receive([&](stage_done& s) { done = std::move(s), got_done = true; },
                [&](stage_failed& f) { failure = f.what; }, caf::after(limit) >> [] {});
  CHECK(failure.empty());
  REQUIRE(got_done);  // the processor's task_done reached the retriever, and stage_done its coordinator
  CHECK(done.stage == 0);
  CHECK(done.step == 0);
  CHECK(done.peak_stash == 1);

  failure = "no answer";
  self->request(a.processor, limit, apply_atom::value, std::uint64_t{0}, 1.0f)
      .receive([&](ok_atom) { failure.clear(); }, [&](caf::error& e) { failure = caf::to_string(e); });
  CHECK(failure.empty());
  self->send_exit(a.retriever, caf::exit_reason::user_shutdown);
  self->send_exit(a.processor, caf::exit_reason::user_shutdown);
  self->send_exit(a.sender, caf::exit_reason::user_shutdown);
}

TEST_CASE("a message outside a role's interface, sent through an untyped handle, is refused and the actor lives on") {
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};
  const stage_actors a = spawn_stage(sys, one_stage());
  const auto limit = test::scaled(std::chrono::milliseconds(10000));
  // A forward_task to the sender compiles only through an untyped handle (stage_interfaces.hpp's static_asserts).
  caf::error refused;
  self->request(caf::actor_cast<caf::actor>(a.sender), limit, forward_task{})
      .receive([](ok_atom) {}, [&](caf::error& e) { refused = e; });
  CHECK(refused == caf::sec::unexpected_message);
  std::string failure = "no answer";
  self->request(a.sender, limit, setup_atom::value, std::vector<caf::actor>{caf::actor_cast<caf::actor>(a.retriever)},
                std::vector<std::string>{})
      .receive([&](ok_atom) { failure.clear(); }, [&](caf::error& e) { failure = caf::to_string(e); });
  CHECK(failure.empty());
  self->send_exit(a.retriever, caf::exit_reason::user_shutdown);
  self->send_exit(a.processor, caf::exit_reason::user_shutdown);
  self->send_exit(a.sender, caf::exit_reason::user_shutdown);
}

TEST_CASE("the actor system's threads run ops serially, a detached actor's own thread too (Note [serial actor threads])") {
  caf::actor_system_config cfg;
  configure_scheduler(cfg);
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};
  const auto answers = []() -> caf::behavior { return {[](int) { return compute_threads(); }}; };
  for (const bool detached : {false, true}) {
    CAPTURE(detached);
    caf::actor a = detached ? sys.spawn<caf::detached>(answers) : sys.spawn(answers);
    int threads = 0;
    self->request(a, test::scaled(std::chrono::seconds(10)), 1)
        .receive([&](int n) { threads = n; }, [&](caf::error& e) { FAIL(sys.render(e)); });
    CHECK(threads == 1);  // OpenMP's default there would be every core
    self->send_exit(a, caf::exit_reason::user_shutdown);
  }
}

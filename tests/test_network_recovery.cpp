// Recovery from a lost node (Note [recovery] in actors/recovery.hpp), with real `actorpipe node` processes
// over loopback and mutual TLS: a node killed twice mid-run and restarted on its port each time; the run ends
// with exactly the parameters and losses of an uninterrupted one, also when its activations travel on data links
// (Note [activations on data links]); the same with two data-parallel replicas
// (and with T = 2) recovering together (Note [recovery with replicas]), also through the CLI. Without restarts
// left, or when the node does not come back in time, the step fails with a clear error.
#include <doctest/doctest.h>

#include <signal.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "actors/data_parallel_pipeline.hpp"
#include "actors/pipeline.hpp"
#include "cli_runs.hpp"
#include "data/synthetic.hpp"
#include "node_process.hpp"
#include "equivalence.hpp"
#include "pipeline_test_models.hpp"
#include "test_support.hpp"

using namespace ap;
using namespace std::chrono_literals;
using test::contains;

namespace {

using test::actorpipe;

// Six layers whose middle one sleeps 15 ms forward and backward: a step lasts long enough to be interrupted.
// `width` 512: 64-row microbatches of 512 features (128 KB) travel on activation links (Note [activations on
// data links]).
sequential slow_model(int width = 16) {
  const std::string w = std::to_string(width);
  sequential m;
  for (const std::string& spec : {"linear:12:" + w, std::string("tanh"), "linear:" + w + ":" + w,
                                  std::string("sleep:15:15"), std::string("relu"), "linear:" + w + ":4"})
    m.add(make_layer(spec));
  m.initialize(3);
  return m;
}

pipeline_options recovering_options(std::vector<std::string> nodes) {
  pipeline_options o = test::on_nodes(test::pipeline_options_for(2, 4, "1f1b", 1, test::adam_optimizer()), std::move(nodes),
                                      test::tls_security());
  o.timeout = test::scaled(20s);
  o.restart_on_failure = 2;
  o.restart_wait = test::scaled(20s);
  o.snapshot_every = 3;
  return o;
}

// The pipeline's log lines (options.log), kept from any thread, read whole.
class log_lines {
 public:
  std::function<void(const std::string&)> sink() {
    return [this](const std::string& line) {
      std::lock_guard<std::mutex> lock(mutex_);
      lines_.push_back(line);
    };
  }
  std::string text() {
    std::lock_guard<std::mutex> lock(mutex_);
    std::string all;
    for (const auto& l : lines_) all += l + "\n";
    return all;
  }

 private:
  std::mutex mutex_;
  std::vector<std::string> lines_;
};

}  // namespace

namespace {

// A node killed twice mid-run and restarted on its port each time, against the same run uninterrupted.
void killed_twice(int width, const dataset& d, bool on_links) {
  const int steps = 8;
  test::node_process first(actorpipe);
  auto second = std::make_unique<test::node_process>(actorpipe);
  const int port = second->port();
  log_lines lines;
  pipeline_options o = recovering_options({first.address(), second->address()});
  o.log = lines.sink();

  std::vector<float> reference_losses;
  sequential reference;
  {
    pipeline uninterrupted(slow_model(width), o);
    for (int s = 0; s < steps; ++s)
      reference_losses.push_back(uninterrupted.train_step(d.inputs, d.labels, static_cast<std::uint64_t>(s)));
    reference = uninterrupted.gather_model();
    CHECK(uninterrupted.restarts() == 0);
  }

  std::atomic<int> step_now{-1};
  std::thread killer([&] {
    for (int at : {2, 5}) {
      while (step_now.load() < at) std::this_thread::sleep_for(1ms);
      std::this_thread::sleep_for(40ms);  // a step lasts ~150 ms: kill it mid-way
      second->process().kill9();
      std::this_thread::sleep_for(300ms);
      second = std::make_unique<test::node_process>(actorpipe, std::vector<std::string>{}, port);  // same address
    }
    // A child dies with the thread that started it (PR_SET_PDEATHSIG): stay until the run is over.
    while (step_now.load() < steps) std::this_thread::sleep_for(1ms);
  });
  std::vector<float> losses;
  pipeline pipe(slow_model(width), o);
  std::string failure;
  sequential recovered;
  try {
    for (int s = 0; s < steps; ++s) {
      step_now = s;
      losses.push_back(pipe.train_step(d.inputs, d.labels, static_cast<std::uint64_t>(s)));
    }
    recovered = pipe.gather_model();  // while the restarted node lives (its starter thread is the killer)
  } catch (const std::exception& e) {
    failure = e.what();
  }
  step_now = steps;  // lets the killer finish
  killer.join();
  REQUIRE_MESSAGE(failure.empty(), failure << "\nfirst node:\n" << first.process().stderr_text() << "\nsecond node:\n"
                                           << second->process().stderr_text());
  const std::string log = lines.text();
  INFO(log);
  CHECK(pipe.restarts() == 2);
  CHECK(contains(log, "recovery 1 of 2: step "));
  CHECK(contains(log, "stage 1 on node " + second->address() + " is gone"));
  CHECK(contains(log, "recovery 2: the nodes answered after "));
  for (int s = 0; s < steps; ++s) {
    INFO("step " << s);
    CHECK(losses[static_cast<std::size_t>(s)] == reference_losses[static_cast<std::size_t>(s)]);
  }
  test::check_same_parameters(reference, recovered, 0.0f, "killed twice, recovered");
  CHECK(first.process().running());
  // The node started last took its activations on a link opened to it after the second recovery.
  CHECK(contains(second->process().stderr_text(), "stage 1: an activation link opened") == on_links);
}

}  // namespace

TEST_CASE("a node killed twice mid-run and restarted each time: the run ends exactly as an uninterrupted one") {
  killed_twice(16, test::small_blobs(16), false);
}

TEST_CASE("the same with activations on data links: the links die with the node and open again") {
  killed_twice(512, make_blobs(256, 12, 4, 3), true);
}

namespace {

// Replica d's stage s on node (2d + s) % 2, so the killed node held stage 1 of both replicas, and their rings met on
// it; every stage split over T tensor-parallel ranks (Note [recovery with replicas]).
void two_replicas_recover(int T) {
  const dataset d = test::small_blobs(16);
  const int steps = 6;
  test::node_process first(actorpipe);
  auto second = std::make_unique<test::node_process>(actorpipe);
  const int port = second->port();
  log_lines lines;
  pipeline_options o = recovering_options({first.address(), second->address()});
  o.tensor_parallel = T;
  o.log = lines.sink();
  std::vector<float> reference_losses;
  sequential reference;
  {
    data_parallel_pipeline uninterrupted(slow_model(), o, 2);
    for (int s = 0; s < steps; ++s)
      reference_losses.push_back(uninterrupted.train_step(d.inputs, d.labels, static_cast<std::uint64_t>(s)));
    reference = uninterrupted.first().gather_model();
    CHECK(uninterrupted.restarts() == 0);
  }
  std::atomic<int> step_now{-1};
  std::thread killer([&] {
    while (step_now.load() < 4) std::this_thread::sleep_for(1ms);  // after the snapshot of step 2: steps 3 replayed
    std::this_thread::sleep_for(40ms);
    second->process().kill9();
    std::this_thread::sleep_for(300ms);
    second = std::make_unique<test::node_process>(actorpipe, std::vector<std::string>{}, port);
    while (step_now.load() < steps) std::this_thread::sleep_for(1ms);
  });
  std::vector<float> losses;
  data_parallel_pipeline replicated(slow_model(), o, 2);
  std::string failure;
  sequential recovered;
  try {
    for (int s = 0; s < steps; ++s) {
      step_now = s;
      losses.push_back(replicated.train_step(d.inputs, d.labels, static_cast<std::uint64_t>(s)));
    }
    recovered = replicated.first().gather_model();
  } catch (const std::exception& e) {
    failure = e.what();
  }
  step_now = steps;
  killer.join();
  REQUIRE_MESSAGE(failure.empty(), failure << "\nfirst node:\n" << first.process().stderr_text() << "\nsecond node:\n"
                                           << second->process().stderr_text());
  const std::string log = lines.text();
  INFO(log);
  CHECK(replicated.restarts() == 1);
  CHECK(contains(log, "recovery 1 of 2: step "));
  CHECK(contains(log, "ms for the nodes of 2 replicas"));
  CHECK(contains(log, "recovery 1: the nodes answered after "));
  CHECK(contains(log, "every replica's stages restored from the snapshot and 1 step(s) replayed"));
  for (int s = 0; s < steps; ++s) {
    INFO("step " << s);
    CHECK(losses[static_cast<std::size_t>(s)] == reference_losses[static_cast<std::size_t>(s)]);
  }
  test::check_same_parameters(reference, recovered, 0.0f, "two replicas, a node killed, recovered");
}

}  // namespace

TEST_CASE("two data-parallel replicas on nodes, a node killed mid-run and restarted: the run ends as an uninterrupted one") {
  two_replicas_recover(1);
}

TEST_CASE("the same with every stage split over 2 tensor-parallel ranks (D = 2 x P = 2 x T = 2 on 2 nodes)") {
  two_replicas_recover(2);
}

namespace {

// A node killed after the stages were placed, before the first snapshot, and restarted on its port: the stages
// are placed again from the setups they were built with, which must still hold their weights (Note [weights on
// demand]); the steps after it are the uninterrupted ones. `make` builds a pipeline or D replicas.
template <class Make>
void lost_before_first_step(Make make, const std::string& placed_again) {
  const dataset d = test::small_blobs(16);
  const int steps = 3;
  test::node_process first(actorpipe);
  auto second = std::make_unique<test::node_process>(actorpipe);
  const int port = second->port();
  log_lines lines;
  pipeline_options o = recovering_options({first.address(), second->address()});
  o.log = lines.sink();
  std::vector<float> expected;
  {
    auto uninterrupted = make(o);
    for (int s = 0; s < steps; ++s)
      expected.push_back(uninterrupted->train_step(d.inputs, d.labels, static_cast<std::uint64_t>(s)));
  }
  auto pipe = make(o);
  second->process().kill9();  // placed, not yet snapshotted
  std::atomic<bool> done{false};
  std::thread restart([&] {
    std::this_thread::sleep_for(300ms);
    second = std::make_unique<test::node_process>(actorpipe, std::vector<std::string>{}, port);
    while (!done.load()) std::this_thread::sleep_for(1ms);  // a child dies with the thread that started it
  });
  std::string failure;
  std::vector<float> losses;
  try {
    for (int s = 0; s < steps; ++s) losses.push_back(pipe->train_step(d.inputs, d.labels, static_cast<std::uint64_t>(s)));
  } catch (const std::exception& e) {
    failure = e.what();
  }
  done = true;
  restart.join();
  const std::string log = lines.text();
  INFO(log);
  REQUIRE_MESSAGE(failure.empty(), failure);
  CHECK(pipe->restarts() == 1);
  CHECK(contains(log, placed_again));
  CHECK(losses == expected);
}

}  // namespace

TEST_CASE("a node lost before the first step: the stages are placed again from scratch, the run is the uninterrupted one") {
  lost_before_first_step([](const pipeline_options& o) { return std::make_unique<pipeline>(slow_model(), o); },
                         "before any step: placing the stages again");
}

TEST_CASE("the same with two data-parallel replicas: every replica placed again with its first weights") {
  lost_before_first_step(
      [](const pipeline_options& o) { return std::make_unique<data_parallel_pipeline>(slow_model(), o, 2); },
      "before any step: placing every replica again");
}

TEST_CASE("a lost node that does not come back within restart_wait fails the step, naming it and the wait") {
  const dataset d = test::small_blobs(16);
  test::node_process first(actorpipe), second(actorpipe);
  pipeline_options o = recovering_options({first.address(), second.address()});
  o.restart_wait = 1s;
  pipeline pipe(slow_model(), o);
  CHECK(std::isfinite(pipe.train_step(d.inputs, d.labels, 0)));
  second.process().kill9();
  const auto [message, took] = test::failed_step(pipe, d, 1);
  INFO(message);
  CHECK(contains(message, "stage 1 on node " + second.address() + " is gone"));
  CHECK(contains(message, "the nodes did not come back within 1000 ms"));
  CHECK(contains(message, "cannot connect to node " + second.address()));
  CHECK(pipe.restarts() == 1);
}

namespace {

// `actorpipe train --nodes ... --restart-on-failure 1 --data-parallel D`, a node killed mid-run and restarted.
void cli_run_recovers(int D) {
  test::node_process first(actorpipe);
  auto second = std::make_unique<test::node_process>(actorpipe);
  std::vector<std::string> args{actorpipe, "train", "--stages", "2", "--microbatches", "4", "--train-limit", "2048",
                                "--epochs", "6", "--batch-size", "64", "--restart-on-failure", "1",
                                "--restart-wait-ms", "20000", "--snapshot-every", "7", "--data-parallel",
                                std::to_string(D), "--nodes", first.address() + "," + second->address()};
  for (const auto& f : test::transport_flags(test::tls_security())) args.push_back(f);
  const nlohmann::json expected = test::result_of(test::run_program(args));

  test::child_process run(args);
  const auto t0 = std::chrono::steady_clock::now();
  // Built (its plan printed after its stages were placed and, with replicas, their rings connected): a node lost
  // while the pipeline is built fails the run, which is not what this test is about.
  const auto placed = [&] { return contains(run.stderr_text(), "stage 1: predicted busy"); };
  while (!placed() && std::chrono::steady_clock::now() - t0 < test::scaled(20s)) std::this_thread::sleep_for(5ms);
  REQUIRE_MESSAGE(placed(), run.stderr_text());
  std::this_thread::sleep_for(200ms);  // some steps in (the run takes ~2 s)
  const int port = second->port();
  second->process().kill9();
  second = std::make_unique<test::node_process>(actorpipe, std::vector<std::string>{}, port);
  const test::program_run finished = test::finish(run);
  const std::string& log = finished.err;
  INFO(log);
  const nlohmann::json got = test::result_of(finished);
  CHECK(contains(log, "recovery 1 of 1: "));  // lost during a step, or during a snapshot after one
  // The lost node, named; "is gone", or, when the restarted node already listens on its port as the loss is
  // probed, "stopped answering heartbeats".
  CHECK(contains(log, "stage 1 on node " + second->address() + " "));
  CHECK((contains(log, " is gone") || contains(log, " stopped answering heartbeats")));
  // Lost after some steps: restored from the snapshot; before the first one (a loaded machine): placed again.
  CHECK((contains(log, D == 1 ? "every stage restored from the snapshot" : "every replica's stages restored from the snapshot") ||
         contains(log, D == 1 ? "before any step: placing the stages again" : "before any step: placing every replica again")));
  // Every figure of the result but the timings is the same: the losses, test_accuracy, steps.
  test::check_same_fields(got, expected, {"last_epoch_mean_loss", "last_step_loss", "test_accuracy", "steps"});
  CHECK(got.at("restarts") == 1);
  CHECK(expected.at("restarts") == 0);
}

}  // namespace

TEST_CASE("`actorpipe train --nodes --restart-on-failure 1`: a node killed and restarted mid-run, the same result as without") {
  cli_run_recovers(1);
}

TEST_CASE("the same with --data-parallel 2: both replicas recover together, the same result as without") {
  cli_run_recovers(2);
}

TEST_CASE("a node that stops answering (SIGSTOP) is waited for until it answers again (SIGCONT), the same result") {
  const dataset d = test::small_blobs(16);
  const int steps = 4;
  test::node_process first(actorpipe), second(actorpipe);
  std::mutex lines_mutex;
  std::string log;
  pipeline_options o = recovering_options({first.address(), second.address()});
  o.restart_on_failure = 1;
  o.log = [&](const std::string& line) {
    std::lock_guard<std::mutex> lock(lines_mutex);
    log += line + "\n";
  };
  const auto logged = [&](const std::string& part) {
    std::lock_guard<std::mutex> lock(lines_mutex);
    return contains(log, part);
  };
  std::vector<float> reference;
  {
    pipeline uninterrupted(slow_model(), o);
    for (int s = 0; s < steps; ++s) reference.push_back(uninterrupted.train_step(d.inputs, d.labels, static_cast<std::uint64_t>(s)));
  }
  std::atomic<bool> done{false};
  std::thread resumer([&] {
    while (!done && !logged("recovery 1 of 1: ")) std::this_thread::sleep_for(5ms);
    kill(second.process().pid(), SIGCONT);
  });
  pipeline pipe(slow_model(), o);
  std::vector<float> losses;
  std::string failure;
  try {
    for (int s = 0; s < steps; ++s) {
      if (s == 1) kill(second.process().pid(), SIGSTOP);
      losses.push_back(pipe.train_step(d.inputs, d.labels, static_cast<std::uint64_t>(s)));
    }
  } catch (const std::exception& e) {
    failure = e.what();
  }
  done = true;
  resumer.join();
  REQUIRE_MESSAGE(failure.empty(), failure);
  INFO(log);
  CHECK(pipe.restarts() == 1);
  CHECK(contains(log, "stage 1 on node " + second.address() + " stopped answering heartbeats"));
  CHECK(losses == reference);
}

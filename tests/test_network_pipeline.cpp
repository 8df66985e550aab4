// Stages on `actorpipe node` processes over loopback (real processes, 127.0.0.1): the same parameters as in
// one process for GPipe and 1F1B on 2 and 4 nodes; a node killed mid-step (kill -9) fails the step within
// seconds naming the stage and host:port, while the coordinator and the other node live on; and bad input
// (unreachable address, another protocol version, a port in use, a peer that drops or stalls the
// connection during set-up) is a clear error that never hangs; a restarted node resumes from a checkpoint.
// Nodes and coordinators speak mutual TLS (test certificates, node_process.hpp) unless a test says --insecure.
// Every node is killed and reaped by RAII.
#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <memory>
#include <set>
#include <thread>

#include <caf/all.hpp>
#include <nlohmann/json.hpp>
#include <caf/binary_deserializer.hpp>
#include <caf/binary_serializer.hpp>

#include "actors/handshake.hpp"
#include "actors/message_types.hpp"
#include "actors/node.hpp"
#include "actors/node_probe.hpp"
#include "network/guarded_transport.hpp"
#include "actors/pipeline.hpp"
#include "actors/stage_spawner.hpp"
#include "checkpoint/checkpoint.hpp"
#include "data/synthetic.hpp"
#include "plan/cores.hpp"
#include "memory_reads.hpp"
#include "cli_runs.hpp"
#include "node_process.hpp"
#include "equivalence.hpp"
#include "pipeline_test_models.hpp"
#include "test_support.hpp"

using namespace ap;
using namespace std::chrono_literals;

namespace {

using namespace ap::test;


run_result train_steps(const sequential& model, const dataset& d, const pipeline_options& o, int steps) {
  pipeline pipe(model, o);
  run_result r;
  for (int s = 0; s < steps; ++s) r.losses.push_back(pipe.train_step(d.inputs, d.labels, static_cast<std::uint64_t>(s)));
  r.model = pipe.gather_model();
  return r;
}

// Six layers whose middle one sleeps 40 ms forward and backward: a step lasts long enough to be interrupted.
sequential slow_model() {
  sequential model;
  for (const char* spec : {"linear:12:16", "tanh", "linear:16:16", "sleep:40:40", "relu", "linear:16:4"})
    model.add(make_layer(spec));
  model.initialize(3);
  return model;
}

// The text of the pipeline_error that building a pipeline throws, or "" if it builds.
std::string construction_error(const sequential& model, const pipeline_options& o) {
  try {
    pipeline pipe(model, o);
  } catch (const pipeline_error& e) {
    return e.what();
  }
  return "";
}


// A TCP socket listening on 127.0.0.1 that never speaks BASP: a stand-in for a peer that is not a node.
struct raw_listener {
  int fd = -1;
  int port = 0;
  raw_listener() {
    fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = 0;
    REQUIRE(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    REQUIRE(listen(fd, 8) == 0);
    socklen_t len = sizeof a;
    getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    port = ntohs(a.sin_port);
  }
  ~raw_listener() { close(fd); }
  std::string address() const { return "127.0.0.1:" + std::to_string(port); }
};

}  // namespace

TEST_CASE("2 and 4 nodes train to the same parameters as one process, for GPipe and 1F1B") {
  const dataset d = test::small_blobs(32);
  std::vector<std::unique_ptr<test::node_process>> nodes;
  for (int i = 0; i < 4; ++i) nodes.push_back(std::make_unique<test::node_process>(actorpipe));
  for (const std::string sched : {"gpipe", "1f1b"}) {
    pipeline_options o = test::pipeline_options_for(4, 4, sched, 1, test::adam_optimizer(0.01f));
    o.security = test::tls_security();
    run_result local = train_steps(test::nine_layer_model(), d, o, 3);
    for (std::size_t n : {2u, 4u}) {
      o.nodes.clear();
      for (std::size_t i = 0; i < n; ++i) o.nodes.push_back(nodes[i]->address());
      run_result remote = train_steps(test::nine_layer_model(), d, o, 3);
      const std::string label = sched + " on " + std::to_string(n) + " nodes";
      test::check_same_run(remote, local, 1e-5f, 1e-5, label);
    }
  }
  for (auto& n : nodes) CHECK(n->process().running());  // every pipeline came and went; the nodes live on
}

// Microbatches of 128 rows go beside their messages over mutual TLS: the activations (256 features, 128 KB) and their
// gradients between the stages, the coordinator's inputs to stage 0 (160 features, 80 KB) and its gradients of the
// outputs to stage 1 (128 classes, 64 KB); the run equals one process (Note [activations on data links]).
TEST_CASE("activations, inputs and output gradients on data links between 2 nodes over mutual TLS, equal one process") {
  const dataset d = make_blobs(256, 160, 128, 5);
  const auto wide = [] {
    sequential m;
    for (const char* spec : {"linear:160:256", "relu", "linear:256:256", "relu", "linear:256:128"}) m.add(make_layer(spec));
    m.initialize(11);
    return m;
  };
  test::node_process a(actorpipe), b(actorpipe);
  pipeline_options o = test::pipeline_options_for(2, 2, "1f1b", 1, test::adam_optimizer());
  o.security = test::tls_security();
  run_result local = train_steps(wide(), d, o, 3);
  o.nodes = {a.address(), b.address()};
  run_result remote = train_steps(wide(), d, o, 3);
  CHECK(remote.losses == local.losses);  // bit for bit: the bytes are the same, only their road differs
  test::check_same_run(remote, local, 1e-7f, 1e-9, "2 nodes, activations on data links");
  // Each stage's inbox took two links: stage 0 one from stage 1 (gradients) and one from the coordinator
  // (inputs), stage 1 one from stage 0 (activations) and one from the coordinator (output gradients).
  CHECK(test::count_of(a.process().stderr_text(), "stage 0: an activation link opened") == 2);
  CHECK(test::count_of(b.process().stderr_text(), "stage 1: an activation link opened") == 2);
}

TEST_CASE("2 nodes x 2 tensor-parallel ranks (threads on each node), with clipping, equal one process") {
  // The stage_spec carries T; each node runs its stage's ranks as threads (Note [tensor-parallel stage]).
  const dataset d = test::small_blobs(32);
  std::vector<std::unique_ptr<test::node_process>> nodes;
  for (int i = 0; i < 2; ++i) nodes.push_back(std::make_unique<test::node_process>(actorpipe));
  pipeline_options o = test::on_nodes(test::pipeline_options_for(2, 4, "zb-h1", 1, test::adam_optimizer()),
                                      {nodes[0]->address(), nodes[1]->address()}, test::tls_security());
  o.tensor_parallel = 2;
  o.clip_grad_norm = 0.1f;
  o.layers_per_chunk = {4, 7};
  sequential reference = test::linear_pairs_model();
  local_runner local(reference, o.optimizer, "cross_entropy", o.clip_grad_norm);
  pipeline pipe(test::linear_pairs_model(), o);
  for (int s = 0; s < 3; ++s) {
    const float expected = local.train_step(d.inputs, d.labels, static_cast<std::uint64_t>(s));
    CHECK(pipe.train_step(d.inputs, d.labels, static_cast<std::uint64_t>(s)) == doctest::Approx(expected).epsilon(1e-5));
  }
  sequential gathered = pipe.gather_model();
  test::check_same_parameters(gathered, reference, 1e-5f, "2 nodes x TP 2");
}

TEST_CASE("a node killed mid-step fails the step within seconds, naming the stage and host:port") {
  const dataset d = test::small_blobs(16);
  const sequential model = slow_model();
  test::node_process first(actorpipe), second(actorpipe);
  pipeline_options o =
      test::on_nodes(test::pipeline_options_for(2, 4, "1f1b"), {first.address(), second.address()}, test::tls_security());
  o.timeout = 20s;  // so the failure has to come from the monitor, not from a wait running out
  auto pipe = std::make_unique<pipeline>(model, o);
  REQUIRE(std::isfinite(pipe->train_step(d.inputs, d.labels, 0)));  // a step takes ~350 ms (the sleep layer)

  std::chrono::steady_clock::time_point killed_at;
  std::thread killer([&] {
    std::this_thread::sleep_for(150ms);
    killed_at = std::chrono::steady_clock::now();
    second.process().kill9();
  });
  std::string message;
  std::chrono::steady_clock::time_point failed_at;
  try {
    pipe->train_step(d.inputs, d.labels, 1);
  } catch (const pipeline_error& e) {
    message = e.what();
  }
  failed_at = std::chrono::steady_clock::now();
  killer.join();
  INFO(message);
  CHECK(contains(message, "step 1: stage 1 on node " + second.address() + " is gone"));
  // Killed, not stopped: the probe of its port is refused (or, on a loaded machine, gets no answer at all).
  CHECK_FALSE(contains(message, "stopped answering heartbeats"));
  const double latency = std::chrono::duration<double>(failed_at - killed_at).count();
  MESSAGE("the step failed " << latency << " s after the kill");
  CHECK(latency < test::scaled(3.0));
  CHECK(first.process().running());

  // The pipeline stays failed (no step can complete without stage 1) and says why at once.
  const auto [again, took] = test::failed_step(*pipe, d, 2);
  CHECK(contains(again, "stage 1 on node " + second.address()));
  CHECK(took < test::scaled(1.0));
  CHECK(seconds_of([&] { pipe.reset(); }) < test::scaled(10.0));  // the coordinator shuts down cleanly

  // The surviving node, and the dead one restarted on its old port, serve a new pipeline.
  test::node_process restarted(actorpipe, {}, second.port());
  pipeline fresh(model, o);
  CHECK(std::isfinite(fresh.train_step(d.inputs, d.labels, 0)));
  CHECK(first.process().running());
}

TEST_CASE("kill a node mid-step, restart it, resume from the last checkpoint: the same result as an uninterrupted run") {
  const dataset d = test::small_blobs(16);
  const auto slow_model = [](std::uint64_t seed) {
    sequential m;
    for (const char* spec : {"linear:12:16", "tanh", "linear:16:16", "sleep:15:15", "relu", "linear:16:4"})
      m.add(make_layer(spec));
    m.initialize(seed);
    return m;
  };
  pipeline_options o = pipeline_options_for(2, 4, "1f1b");
  o.security = test::tls_security();
  o.optimizer.kind = "adam";
  o.optimizer.lr = 0.01f;
  const std::string path = "/tmp/actorpipe-network-test-" + std::to_string(getpid()) + ".safetensors";
  struct remove_file {
    std::string path;
    ~remove_file() { std::remove(path.c_str()); }
  } cleanup{path};

  run_result reference = train_steps(slow_model(3), d, o, 6);  // one process, uninterrupted

  test::node_process first(actorpipe), second(actorpipe);
  o.nodes = {first.address(), second.address()};
  {
    pipeline pipe(slow_model(3), o);
    for (std::uint64_t s = 0; s < 3; ++s) pipe.train_step(d.inputs, d.labels, s);
    pipe.save_checkpoint(path, training_state{3, 0, 3, 0, "slow"});
    std::thread killer([&] {
      std::this_thread::sleep_for(60ms);
      second.process().kill9();
    });
    std::string message;
    try {
      pipe.train_step(d.inputs, d.labels, 3);
    } catch (const pipeline_error& e) {
      message = e.what();
    }
    killer.join();
    CHECK_MESSAGE(contains(message, "stage 1 on node " + second.address()), message);
  }
  test::node_process restarted(actorpipe, {}, second.port());
  pipeline resumed(slow_model(99), o);  // other initial weights: everything must come from the checkpoint
  CHECK(resumed.load_checkpoint(path).step == 3);
  for (std::uint64_t s = 3; s < 6; ++s) resumed.train_step(d.inputs, d.labels, s);
  sequential after = resumed.gather_model();
  test::check_same_parameters(reference.model, after, 1e-5f, "resumed on a restarted node");
}

TEST_CASE("interleaved 1F1B and ZB-H1 across nodes, and one node listed twice, equal one process") {
  const dataset d = test::small_blobs(32);
  test::node_process a(actorpipe), b(actorpipe);
  pipeline_options o = pipeline_options_for(2, 4);
  o.security = test::tls_security();
  o.optimizer.kind = "sgd";
  o.optimizer.lr = 0.1f;
  o.optimizer.momentum = 0.9f;
  struct variant {
    std::string schedule;
    int chunks;
    std::vector<std::string> nodes;
  };
  for (const variant& v : {variant{"interleaved", 2, {a.address(), b.address()}},
                           variant{"zb-h1", 1, {a.address(), b.address()}}, variant{"1f1b", 1, {a.address(), a.address()}}}) {
    o.schedule = v.schedule;
    o.chunks_per_stage = v.chunks;
    o.nodes.clear();
    run_result local = train_steps(test::nine_layer_model(), d, o, 2);
    o.nodes = v.nodes;
    run_result remote = train_steps(test::nine_layer_model(), d, o, 2);
    test::check_same_parameters(local.model, remote.model, 1e-5f, v.schedule + " on " + std::to_string(v.nodes.size()) + " node addresses");
  }
}

TEST_CASE("a coordinator killed mid-training leaves its nodes clean and ready for the next one") {
  test::node_process node(actorpipe);
  // `actorpipe train --nodes` (Fashion-MNIST, as a user runs it) as the coordinator process.
  test::child_process coordinator({actorpipe, "train", "--stages", "2", "--microbatches", "4", "--train-limit", "4096",
                                   "--epochs", "1000", "--nodes", node.address() + "," + node.address(), "--tls-ca",
                                   tls_security().ca_file, "--tls-cert", tls_security().certificate_file, "--tls-key",
                                   tls_security().key_file});
  const auto placed = [&] { return contains(node.process().stderr_text(), "stage 1 started"); };
  const auto t0 = std::chrono::steady_clock::now();
  while (!placed() && std::chrono::steady_clock::now() - t0 < test::scaled(20s)) std::this_thread::sleep_for(20ms);
  REQUIRE_MESSAGE(placed(), coordinator.stderr_text());
  std::this_thread::sleep_for(300ms);  // a few steps in
  coordinator.kill9();
  const auto stopped = [&] { return contains(node.process().stderr_text(), "stopped stage(s) 0, 1: their coordinator is gone"); };
  const auto t1 = std::chrono::steady_clock::now();
  while (!stopped() && std::chrono::steady_clock::now() - t1 < test::scaled(5s)) std::this_thread::sleep_for(20ms);
  INFO(node.process().stderr_text());
  CHECK(stopped());
  CHECK(node.process().running());
  const dataset d = test::small_blobs(16);
  const pipeline_options o = test::on_nodes(test::pipeline_options_for(2), {node.address()}, test::tls_security());
  pipeline next(test::nine_layer_model(), o);
  CHECK(std::isfinite(next.train_step(d.inputs, d.labels, 0)));
}

TEST_CASE("`actorpipe train --nodes --insecure` exits with an error naming the stage and host:port when a node is killed") {
  test::scratch_dir dir{"node_killed"};
  const std::string steps_log = dir.file("steps.jsonl");
  test::node_process first(actorpipe, {"--insecure"}), second(actorpipe, {"--insecure"});
  test::child_process coordinator({actorpipe, "train", "--stages", "2", "--microbatches", "4", "--train-limit", "4096",
                                   "--epochs", "1000", "--nodes", first.address() + "," + second.address(), "--insecure",
                                   "--log", steps_log});
  // Killed once a step has ended (its line in the log), so the failure is a step's, not the set-up's.
  const auto stepping = [&] {
    std::ifstream in(steps_log);
    std::string line;
    while (std::getline(in, line))
      if (contains(line, "\"step\"")) return true;
    return false;
  };
  const auto t0 = std::chrono::steady_clock::now();
  while (!stepping() && std::chrono::steady_clock::now() - t0 < test::scaled(20s)) std::this_thread::sleep_for(20ms);
  REQUIRE_MESSAGE(stepping(), coordinator.stderr_text());
  second.process().kill9();
  const int code = coordinator.wait_exit(test::scaled(10s));
  const std::string log = coordinator.stderr_text();
  INFO(log);
  CHECK(code == 1);
  CHECK(contains(log, "error: step "));
  CHECK(contains(log, "stage 1 on node " + second.address()));
  CHECK(first.process().running());
}

TEST_CASE("a stage a node cannot build is refused with the node's reason, the node serves the next pipeline") {
  test::node_process node(actorpipe);
  pipeline_options o = test::on_nodes(test::pipeline_options_for(2), {node.address()}, test::tls_security());
  o.optimizer.kind = "nope";
  std::string message;
  CHECK(seconds_of([&] { message = construction_error(test::nine_layer_model(), o); }) < test::scaled(5.0));
  CHECK_MESSAGE(contains(message, "placing stage 0 on node " + node.address() + ": unknown optimizer 'nope'"), message);
  o.optimizer.kind = "sgd";
  pipeline next(test::nine_layer_model(), o);
  const dataset d = test::small_blobs(8);
  CHECK(std::isfinite(next.train_step(d.inputs, d.labels, 0)));
}

TEST_CASE("bad node addresses are clear errors and never hang") {
  const sequential model = test::nine_layer_model();
  pipeline_options o = test::on_nodes(test::pipeline_options_for(2), {"127.0.0.1:1"}, test::tls_security());  // nobody listens on port 1
  std::string message;
  CHECK(seconds_of([&] { message = construction_error(model, o); }) < test::scaled(5.0));
  CHECK_MESSAGE(contains(message, "cannot connect to node 127.0.0.1:1"), message);

  o.nodes = {"127.0.0.1"};
  CHECK_THROWS_WITH_AS(pipeline(model, o), doctest::Contains("node address \"127.0.0.1\" is not host:port"),
                       std::invalid_argument);
  o.nodes = {"127.0.0.1:70000"};
  CHECK_THROWS_WITH_AS(pipeline(model, o), doctest::Contains("the port must be 1..65535"), std::invalid_argument);
}

TEST_CASE("a peer that stays silent or hangs up during set-up is a clear error within the timeout") {
  const sequential model = test::nine_layer_model();
  pipeline_options o = test::on_nodes(test::pipeline_options_for(2), {}, test::tls_security());
  o.timeout = 1s;
  {
    raw_listener silent;  // the kernel accepts the connection; nobody ever answers
    o.nodes = {silent.address()};
    std::string message;
    CHECK(seconds_of([&] { message = construction_error(model, o); }) < test::scaled(5.0));
    // Our 1000 ms limit or the middleman's own connection timeout, whichever comes first (wait_failure_text).
    CHECK_MESSAGE(contains(message, "cannot connect to node " + silent.address() + ": no answer"), message);
    CHECK_MESSAGE(contains(message, "1000 ms"), message);
  }
  {
    raw_listener rude;  // accepts, then hangs up at once
    std::thread hang_up([&] {
      const int c = accept(rude.fd, nullptr, nullptr);
      if (c >= 0) close(c);
    });
    o.nodes = {rude.address()};
    std::string message;
    CHECK(seconds_of([&] { message = construction_error(model, o); }) < test::scaled(5.0));
    hang_up.join();
    CHECK_MESSAGE(contains(message, "cannot connect to node " + rude.address()), message);
  }
}

TEST_CASE("a node of another protocol version is refused on both sides") {
  test::node_process node(actorpipe, {"--protocol-version", "999", "--insecure"});
  const pipeline_options o = test::on_nodes(test::pipeline_options_for(2), {node.address()}, test::insecure_transport());
  const std::string message = construction_error(test::nine_layer_model(), o);
  INFO(message);
  CHECK(contains(message, "node " + node.address() + " refused the handshake: protocol version mismatch"));
  CHECK(contains(message, "version 999"));
  const std::string log = node.process().stderr_text();
  INFO(log);
  CHECK(contains(log, "refused a coordinator: protocol version mismatch: this node speaks version 999"));
  CHECK(node.process().running());
}

TEST_CASE("a node asked for a port in use exits at once with a clear error") {
  test::node_process first(actorpipe);
  const program_run second =
      run_actorpipe({"node", "--host", "127.0.0.1", "--port", std::to_string(first.port()), "--insecure"});
  CHECK(second.code == 1);
  const std::string& log = second.err;
  INFO(log);
  CHECK(contains(log, "port " + std::to_string(first.port()) + " is already in use"));
}

namespace {

// A layer kind this test binary registers and `actorpipe node` does not know: y = 2 x.
class doubling final : public layer {
 public:
  std::string describe() const override { return "Doubling"; }
  tensor forward(const tensor& x, layer_cache&, const forward_context&) const override {
    tensor y = x;
    for (float& v : y) v *= 2.0f;
    return y;
  }
  void backward_input(const tensor& dy, layer_cache&, tensor* dx) const override {
    if (!dx) return;
    float* pdx = accumulate_into(*dx, shape_of(dy), *this);
    for (std::size_t i = 0; i < dy.size(); ++i) pdx[i] += 2.0f * dy.data()[i];
  }
  std::unique_ptr<layer> clone() const override { return std::make_unique<doubling>(*this); }
  std::string spec() const override { return "net_doubling"; }
};

const layer_kind_registration doubling_kind{"net_doubling", [](const layer_spec& s) {
                                              s.expect_fields(0, "net_doubling");
                                              return std::make_unique<doubling>();
                                            }};

}  // namespace

TEST_CASE("a model using a layer kind the node lacks is refused at set-up, naming the kind and the node") {
  test::node_process node(actorpipe);
  const dataset d = test::small_blobs(8);
  pipeline_options o = test::on_nodes(test::pipeline_options_for(2), {node.address()}, test::tls_security());
  o.layers_per_chunk = {2, 2};  // the user kind starts stage 1 (the block partition would keep it on stage 0)
  for (const char* spec : {"net_doubling", "residual[layernorm:16,net_doubling]"}) {
    CAPTURE(spec);
    sequential model = sequential::from_layer_specs({"linear:12:16", "relu", spec, "linear:16:4"});
    model.initialize(1);
    std::string message;
    CHECK(seconds_of([&] { message = construction_error(model, o); }) < test::scaled(5.0));
    INFO(message);
    CHECK(contains(message, "node " + node.address() + " lacks layer kind 'net_doubling', used by stage 1 (layer 2 " +
                                spec + ")"));
    // In one process the same model trains: this binary knows the kind.
    pipeline_options local = o;
    local.nodes.clear();
    pipeline in_process(model, local);
    CHECK(std::isfinite(in_process.train_step(d.inputs, d.labels, 0)));
  }
  // The node was left clean and serves a model it can build.
  o.layers_per_chunk.clear();
  pipeline next(test::nine_layer_model(), o);
  CHECK(std::isfinite(next.train_step(d.inputs, d.labels, 0)));
}

TEST_CASE("the handshake carries the layer kinds, layer_kinds_lacking lists what a node cannot build") {
  const auto kinds = local_handshake().layer_kinds;
  CHECK(kinds == registered_layer_kinds());
  CHECK(std::find(kinds.begin(), kinds.end(), "net_doubling") != kinds.end());
  CHECK(layer_kinds_lacking({"linear", "net_doubling", "gelu"}, {"gelu", "linear"}) == std::vector<std::string>{"net_doubling"});
  CHECK(layer_kinds_lacking({"linear"}, {"linear"}).empty());
  handshake other = local_handshake();
  other.layer_kinds = {"linear"};
  CHECK(handshake_mismatch(local_handshake(), other, "me", "node x:1").empty());  // differing kinds are not refused here
}

TEST_CASE("a version-1 hello (without layer kinds) is refused by its version, not as an unknown message") {
  caf::actor_system_config cfg;
  add_message_types(cfg);
  caf::actor_system sys{cfg};
  auto node = spawn_node(sys, node_options{});
  std::string failure = "no answer";
  {
    caf::scoped_actor self{sys};
    self->request(node, test::scaled(5s), hello_atom::value, std::uint32_t{1}, true, message_type_names())
        .receive([&](hello_atom, std::uint32_t, bool, std::vector<std::string>&,
                     std::vector<std::string>&) { failure = "accepted"; },
                 [&](caf::error& e) { failure = error_text(e); });
    self->send_exit(node, caf::exit_reason::user_shutdown);
  }
  CHECK(failure == "protocol version mismatch: this node speaks version " + std::to_string(wire_protocol_version) +
                       ", the coordinator version 1");
}

TEST_CASE("the handshake names what differs") {
  const handshake mine = local_handshake();
  CHECK(mine.little_endian == host_is_little_endian());
  CHECK(handshake_mismatch(mine, mine, "a", "b").empty());
  handshake other = mine;
  other.version = mine.version + 1;
  CHECK(contains(handshake_mismatch(mine, other, "the coordinator", "node x:1"),
                 "protocol version mismatch: the coordinator speaks version " + std::to_string(mine.version)));
  other = mine;
  other.little_endian = false;
  CHECK(contains(handshake_mismatch(mine, other, "me", "node x:1"), "node x:1 is big-endian"));
  other = mine;
  other.message_types.pop_back();
  other.message_types.push_back("brand_new_task");
  const std::string why = handshake_mismatch(mine, other, "me", "node x:1");
  CHECK(contains(why, "node x:1 lacks " + mine.message_types.back()));
  CHECK(contains(why, "me lacks brand_new_task"));
}

TEST_CASE("a stage_spec survives the wire and rebuilds the same stage, bad specs name the tensor") {
  caf::actor_system_config cfg;
  add_message_types(cfg);
  caf::actor_system sys{cfg};
  sequential model = test::nine_layer_model();
  stage_setup setup;
  setup.stage = 1;
  setup.stages = 2;
  setup.total_chunks = 4;
  setup.chunk_ids = {1, 3};
  setup.slices.push_back(model.slice(2, 5));
  setup.slices.push_back(model.slice(7, 9));
  setup.options.optimizer.kind = "sgd";
  setup.options.optimizer.momentum = 0.5f;
  setup.options.optimizer.schedule = lr_schedule{"step", 3, 0, 0.0f, 7, 0.25f};  // Note [lr from the optimizer's steps]
  setup.actions = {action{1, op::forward, 0, 1}, action{1, op::backward_input, 0, 3}, action{1, op::backward_weight, 0, 3}};
  stage_spec spec = make_stage_spec(setup);
  std::vector<char> buffer;
  caf::binary_serializer sink{sys, buffer};
  REQUIRE(!sink(spec));
  stage_spec back;
  caf::binary_deserializer source{sys, buffer};
  REQUIRE(!source(back));
  stage_setup rebuilt = stage_setup_from_spec(back);
  CHECK(rebuilt.chunk_ids == setup.chunk_ids);
  CHECK(rebuilt.options.optimizer.kind == "sgd");
  CHECK(rebuilt.options.optimizer.momentum == 0.5f);
  CHECK(rebuilt.options.optimizer.schedule.kind == "step");
  CHECK(rebuilt.options.optimizer.schedule.warmup_steps == 3);
  CHECK(rebuilt.options.optimizer.schedule.step_size == 7);
  CHECK(rebuilt.options.optimizer.schedule.gamma == 0.25f);
  CHECK(rebuilt.actions == setup.actions);
  REQUIRE(rebuilt.slices.size() == 2);
  for (std::size_t c = 0; c < 2; ++c) {
    CHECK(rebuilt.slices[c].first_index() == setup.slices[c].first_index());
    test::check_same_parameters(setup.slices[c], rebuilt.slices[c], 0.0f, "chunk " + std::to_string(c));
  }

  stage_spec missing = back;
  missing.weights.names.erase(missing.weights.names.begin());
  missing.weights.values.erase(missing.weights.values.begin());
  CHECK_THROWS_WITH_AS(stage_setup_from_spec(missing), doctest::Contains("stage 1: missing tensor 4.weight (its parameter)"),
                       std::invalid_argument);
  stage_spec misshapen = back;
  misshapen.weights.values[0] = zeros({3, 3});
  CHECK_THROWS_WITH_AS(stage_setup_from_spec(misshapen), doctest::Contains("stage 1: tensor 4.weight has shape (3, 3) but its parameter has shape (16, 16)"),
                       std::invalid_argument);
  stage_spec elsewhere = back;
  elsewhere.actions[1].stage = 0;
  CHECK_THROWS_WITH_AS(stage_setup_from_spec(elsewhere), doctest::Contains("stage 1: action 1 (3I0) is for stage 0"),
                       std::invalid_argument);
}

TEST_CASE("a frozen node (SIGSTOP) is noticed by the heartbeat and fails the step within seconds") {
  const dataset d = test::small_blobs(16);
  const sequential model = slow_model();
  test::node_process first(actorpipe), second(actorpipe);
  pipeline_options o = pipeline_options_for(2, 4, "gpipe");
  o.security = test::tls_security();
  o.timeout = 60s;  // longer than the test: only the heartbeat can end the wait
  o.nodes = {first.address(), second.address()};
  auto pipe = std::make_unique<pipeline>(model, o);
  REQUIRE(std::isfinite(pipe->train_step(d.inputs, d.labels, 0)));
  kill(second.process().pid(), SIGSTOP);
  const auto [message, took] = test::failed_step(*pipe, d, 1);
  INFO(message);
  MESSAGE("a frozen node was noticed after " << took << " s");
  CHECK(contains(message, "stage 1 on node " + second.address() + " stopped answering heartbeats"));
  CHECK(contains(message, "its port still accepts connections"));
  CHECK(took < connection_timeout.count() + test::scaled(4.0));
  CHECK(seconds_of([&] { pipe.reset(); }) < test::scaled(10.0));
}

TEST_CASE("stages on 2 node processes send their events: busy time, the stage log and the trace cover both, in causal order") {
  test::node_process first(actorpipe), second(actorpipe);
  sequential model;  // stage 0 forwards for 5 ms: far more than any clock error on loopback
  for (const char* spec : {"linear:12:16", "sleep:5:5", "tanh", "linear:16:4"}) model.add(make_layer(spec));
  model.initialize(3);
  pipeline_options o = pipeline_options_for(2, 3, "1f1b");
  o.layers_per_chunk = {2, 2};
  o.record_events = true;
  o.nodes = {first.address(), second.address()};
  o.security = test::tls_security();
  std::vector<stage_event> streamed;
  o.on_event = [&](const stage_event& e) { streamed.push_back(e); };
  pipeline pipe(model, o);
  const dataset d = test::small_blobs(12);
  for (int s = 0; s < 2; ++s) pipe.train_step(d.inputs, d.labels, s);
  const auto events = pipe.events();
  CHECK(events.size() == streamed.size());
  const auto busy = pipe.busy_seconds();
  REQUIRE(busy.size() == 2);
  CHECK(busy[0] > 0.0);
  CHECK(busy[1] > 0.0);
  // Every action of both steps ran, as a start and a finish on its stage.
  for (std::uint64_t step = 0; step < 2; ++step)
    for (int stage = 0; stage < 2; ++stage) {
      std::size_t finished = 0;
      for (const auto& e : events) finished += e.step == step && e.stage == stage && e.kind == event_kind::finish;
      CHECK(finished == pipe.schedule().per_stage[static_cast<std::size_t>(stage)].size());
    }
  // On our clock, stage 1 starts a microbatch's forward after stage 0 started it (5 ms of sleep in between).
  for (std::uint64_t step = 0; step < 2; ++step)
    for (int mb = 0; mb < 3; ++mb) {
      double start0 = -1, start1 = -1;
      for (const auto& e : events)
        if (e.step == step && e.microbatch == mb && e.task == op::forward && e.kind == event_kind::start)
          (e.stage == 0 ? start0 : start1) = e.time_us;
      INFO("step " << step << " microbatch " << mb);
      CHECK(start0 >= 0.0);
      CHECK(start1 > start0);
    }
  const auto log = render_stage_log(events);
  CHECK(std::any_of(log.begin(), log.end(),
                    [](const std::string& l) { return l.rfind("Stage 2: Current task: Forward microbatch 1,", 0) == 0; }));
  const auto trace = nlohmann::json::parse(chrome_trace(events, 2));
  std::set<int> tracks;
  for (const auto& t : trace["traceEvents"])
    if (t["ph"] == "X") tracks.insert(t["tid"].get<int>());
  CHECK(tracks == std::set<int>{0, 1});
}

TEST_CASE("a node's clock offset on the same machine is 0 within its bound (half the best round trip)") {
  test::node_process node(actorpipe);
  caf::actor_system_config cfg;
  enable_network(cfg);
  caf::actor_system sys{cfg};
  guarded_transport transport{sys, test::tls_security("coordinator"), {}};  // connect_node goes through it
  {
    caf::scoped_actor self{sys};
    const node_address address = parse_node_address(node.address());
    const caf::actor handle = connect_node(self, address, test::scaled(10s));
    const clock_offset c = estimate_clock_offset(self, handle, address, test::scaled(10s));
    // One steady clock: the node read it between our two readings, so |offset| <= half that round trip.
    CHECK(c.bound_us > 0.0);
    CHECK(std::abs(c.offset_us) <= c.bound_us);
  }
}

TEST_CASE("a wait on a node ends as soon as its connection goes, not at its timeout: the clock and the peers (Note [answers from other nodes])") {
  caf::actor_system_config cfg;
  enable_network(cfg);
  caf::actor_system sys{cfg};
  guarded_transport transport{sys, test::tls_security("coordinator"), {}};
  // `wait` on a node frozen by SIGSTOP (so the wait pends), killed 300 ms later: its error and seconds.
  const auto lost_during = [&](const std::function<void(caf::scoped_actor&, const caf::actor&, const node_address&)>& wait) {
    test::node_process node(actorpipe);
    caf::scoped_actor self{sys};
    const node_address address = parse_node_address(node.address());
    const caf::actor handle = connect_node(self, address, test::scaled(10s));
    kill(node.process().pid(), SIGSTOP);
    std::thread killer([&] {
      std::this_thread::sleep_for(300ms);
      node.process().kill9();
    });
    std::string message;
    const double took = seconds_of([&] {
      try {
        wait(self, handle, address);
      } catch (const std::exception& e) {
        message = e.what();
      }
    });
    killer.join();
    return std::make_pair(message, took);
  };
  // 60 s: longer than the test, so only the lost connection can end the waits in time.
  const auto [clock_message, clock_took] = lost_during([](caf::scoped_actor& self, const caf::actor& node, const node_address& a) {
    estimate_clock_offset(self, node, a, 60s);
  });
  INFO(clock_message);
  CHECK(contains(clock_message, "reading its clock"));
  CHECK(clock_took < test::scaled(5.0));
  const auto [peers_message, peers_took] = lost_during([](caf::scoped_actor& self, const caf::actor& node, const node_address& a) {
    connect_peers(self, node, a, {parse_node_address("127.0.0.1:1")}, 60s);
  });
  INFO(peers_message);
  CHECK(contains(peers_message, "node 127.0.0.1:"));
  CHECK(peers_took < test::scaled(5.0));
}

// What --auto plans with, asked of the nodes themselves over mutual TLS (Note [auto on nodes]).
TEST_CASE("a survey of nodes: each machine's cores and fixed threads, the network's lines, a dead node named") {
  test::node_process free_node(actorpipe);
  test::node_process fixed_node(actorpipe, {"--threads", "1"});
  const node_survey survey =
      survey_nodes({free_node.address(), fixed_node.address()}, test::tls_security("coordinator"), test::scaled(10s));
  REQUIRE(survey.nodes.size() == 2);
  const auto here = static_cast<int>(process_cores().size());  // the same machine
  CHECK(survey.nodes[0].address == free_node.address());
  CHECK(survey.nodes[0].host == "127.0.0.1");
  CHECK(survey.nodes[0].cores == here);
  CHECK(survey.nodes[0].threads == 0);
  CHECK(survey.nodes[1].cores == here);
  CHECK(survey.nodes[1].threads == 1);
  CHECK(survey.network.latency_s >= 0.0);
  CHECK(survey.network.per_byte_s > 0.0);  // 4 MiB takes longer than 64 KiB
  CHECK(survey.network.seconds(4 << 20) > survey.network.seconds(0));
  // The same on a data link the first node opened for it (link_echo_atom), TLS as the transport is.
  CHECK(survey.links.latency_s >= 0.0);
  CHECK(survey.links.per_byte_s > 0.0);
  // One machine: the node copied the tensor out of this process's memory, where the kernel lets it (Yama's
  // ptrace_scope above 0 refuses a process that is not this one's child, as the node is).
  std::ifstream yama("/proc/sys/kernel/yama/ptrace_scope");
  int scope = 0;
  const bool between_processes = test::memory_reads_allowed() && (!(yama >> scope) || scope == 0);
  CHECK(!(survey.copies && !test::memory_reads_allowed()));
  if (between_processes) CHECK(survey.copies.has_value());
  if (survey.copies) CHECK(survey.copies->per_byte_s > 0.0);
  {  // and over plain TCP
    test::node_process plain_node(actorpipe, {"--insecure"});
    const node_survey plain = survey_nodes({plain_node.address()}, test::insecure_transport(), test::scaled(10s));
    CHECK(plain.links.per_byte_s > 0.0);
    if (between_processes) CHECK(plain.copies.has_value());
    CHECK(!(plain.copies && !test::memory_reads_allowed()));
  }
  const std::string gone = fixed_node.address();
  fixed_node.process().kill9();
  const std::string refused =
      test::error_of([&] { survey_nodes({free_node.address(), gone}, test::tls_security("coordinator"), 5s); });
  CHECK(test::contains(refused, "cannot connect to node " + gone));
}

// CAF drops a connection whose peer has not answered the handshake by the broker's next heartbeat tick; a node paused
// past that tick (a loaded machine) is still reached (Note [a fresh connection's first heartbeat]).
TEST_CASE("a node that answers its handshake late is still connected: by the coordinator, and by its peer node") {
  test::node_process late(actorpipe, {"--insecure"}), first(actorpipe, {"--insecure"});
  caf::actor_system_config cfg;
  enable_network(cfg);
  caf::actor_system sys{cfg};
  transport_security insecure;
  insecure.insecure = true;
  guarded_transport transport{sys, insecure, {}};
  caf::scoped_actor self{sys};
  const node_address late_address = parse_node_address(late.address());
  const node_address first_address = parse_node_address(first.address());
  const caf::actor first_handle = connect_node(self, first_address, test::scaled(10s));
  const auto pause_late = [&] {  // stopped for 2.5 s: two heartbeat ticks pass before it answers
    REQUIRE(kill(late.process().pid(), SIGSTOP) == 0);
    return std::thread([pid = late.process().pid()] {
      std::this_thread::sleep_for(2500ms);
      kill(pid, SIGCONT);
    });
  };
  std::thread resume = pause_late();
  caf::actor late_handle;
  CHECK_NOTHROW(late_handle = connect_node(self, late_address, test::scaled(10s)));
  resume.join();
  CHECK(late_handle);
  resume = pause_late();
  CHECK_NOTHROW(connect_peers(self, first_handle, first_address, {late_address}, test::scaled(10s)));
  resume.join();
}

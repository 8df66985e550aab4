// Data-parallel replicas of a pipeline whose stages run on `actorpipe node` processes (Note [data-parallel
// nodes]): their gradients meet in ring groups between the nodes; the result equals one process, and a
// killed node fails the step in every replica within seconds, naming it.
#include <doctest/doctest.h>

#include <chrono>
#include <cstring>
#include <map>
#include <memory>
#include <thread>

#include "actors/data_parallel_pipeline.hpp"
#include "collective/by_size_group.hpp"
#include "cli_runs.hpp"
#include "node_process.hpp"
#include "equivalence.hpp"
#include "pipeline_test_models.hpp"
#include "test_support.hpp"

using namespace ap;
using namespace std::chrono_literals;

namespace {

using test::actorpipe;

pipeline_options node_options(const std::vector<std::unique_ptr<test::node_process>>& nodes, int T, float clip) {
  std::vector<std::string> addresses;
  for (auto& n : nodes) addresses.push_back(n->address());
  pipeline_options o =
      test::on_nodes(test::pipeline_options_for(2, 2, "1f1b", 1, test::adam_optimizer()), addresses, test::tls_security());
  o.tensor_parallel = T;
  o.clip_grad_norm = clip;
  o.layers_per_chunk = {4, 7};
  return o;
}

}  // namespace

TEST_CASE("D = 2 replicas x 2 stages on 3 nodes (x 2 tensor-parallel ranks), with clipping, equal one process") {
  // Replica 0's stages on nodes 0, 1; replica 1's on nodes 2, 0: every data-parallel group spans two processes.
  const dataset d = test::small_blobs(32);
  std::vector<std::unique_ptr<test::node_process>> nodes;
  for (int i = 0; i < 3; ++i) nodes.push_back(std::make_unique<test::node_process>(actorpipe));
  for (int T : {1, 2}) {
    CAPTURE(T);
    const pipeline_options o = node_options(nodes, T, 0.1f);
    sequential reference = test::linear_pairs_model();
    local_runner local(reference, o.optimizer, "cross_entropy", o.clip_grad_norm);
    data_parallel_pipeline mesh(test::linear_pairs_model(), o, 2);
    for (int s = 0; s < 3; ++s) {
      const float expected = local.train_step(d.inputs, d.labels, static_cast<std::uint64_t>(s));
      CHECK(mesh.train_step(d.inputs, d.labels, static_cast<std::uint64_t>(s)) == doctest::Approx(expected).epsilon(1e-5));
    }
    sequential gathered = mesh.first().gather_model();
    test::check_same_parameters(gathered, reference, 1e-5f, "D = 2 x P = 2 on 3 nodes");
  }
  for (auto& n : nodes) CHECK(n->process().running());
}

TEST_CASE("D = 3 and 4 replicas on 2 nodes share them: each node's replicas reduce through shared memory first, equal one process") {
  // Note [hierarchical collectives]. One stage: replicas 0 and 2 (and 3's partner 1) on node 0 and 1, so every
  // group spans both processes with two ranks (or one) in each. Two stages, D = 4: each stage's four replicas
  // on one node, the whole group in one process.
  const dataset d = test::small_blobs(32);
  std::vector<std::unique_ptr<test::node_process>> nodes;
  for (int i = 0; i < 2; ++i) nodes.push_back(std::make_unique<test::node_process>(actorpipe));
  struct mesh_shape { int stages, D, T; };
  for (const mesh_shape m : {mesh_shape{1, 4, 1}, mesh_shape{1, 3, 2}, mesh_shape{2, 4, 1}}) {
    CAPTURE(m.stages);
    CAPTURE(m.D);
    CAPTURE(m.T);
    pipeline_options o = node_options(nodes, m.T, 0.1f);
    o.stages = m.stages;
    if (m.stages == 1) o.layers_per_chunk.clear();
    sequential reference = test::linear_pairs_model();
    local_runner local(reference, o.optimizer, "cross_entropy", o.clip_grad_norm);
    data_parallel_pipeline mesh(test::linear_pairs_model(), o, m.D);
    for (int s = 0; s < 3; ++s) {
      const float expected = local.train_step(d.inputs, d.labels, static_cast<std::uint64_t>(s));
      CHECK(mesh.train_step(d.inputs, d.labels, static_cast<std::uint64_t>(s)) == doctest::Approx(expected).epsilon(1e-5));
    }
    sequential gathered = mesh.first().gather_model();
    test::check_same_parameters(gathered, reference, 1e-5f, "replicas sharing 2 nodes");
  }
  for (auto& n : nodes) CHECK(n->process().running());
}

TEST_CASE("a node of one replica killed mid-step fails the step in every replica within seconds, naming it") {
  const dataset d = test::small_blobs(16);
  std::vector<std::unique_ptr<test::node_process>> nodes;
  for (int i = 0; i < 3; ++i) nodes.push_back(std::make_unique<test::node_process>(actorpipe));
  sequential slow;
  for (const char* spec : {"linear:12:16", "tanh", "linear:16:16", "sleep:40:40", "relu", "linear:16:4"})
    slow.add(make_layer(spec));
  slow.initialize(3);
  pipeline_options o = node_options(nodes, 1, 0.0f);
  o.layers_per_chunk = {3, 3};
  o.timeout = test::scaled(20s);  // the failure must come from the lost peer, not from a wait running out
  data_parallel_pipeline mesh(slow, o, 2);
  REQUIRE(std::isfinite(mesh.train_step(d.inputs, d.labels, 0)));
  std::chrono::steady_clock::time_point killed_at;
  std::thread killer([&] {
    std::this_thread::sleep_for(100ms);
    killed_at = std::chrono::steady_clock::now();
    nodes[2]->process().kill9();  // replica 1's stage 0
  });
  const auto [message, took] = test::failed_step(mesh, d, 1);
  killer.join();
  INFO(message);
  CHECK(test::contains(message, nodes[2]->address()));
  const double latency = took - 0.1;
  MESSAGE("the step failed " << latency << " s after the kill");
  CHECK(latency < test::scaled(5.0));
  CHECK(nodes[0]->process().running());
  CHECK(nodes[1]->process().running());
}

TEST_CASE("the gloo and by-size backends (plain TCP nodes) give the ring's parameters bit for bit, equal to one process") {
  // With D = 2 each sum is one addition, the same bits whichever engine adds (Note [collective backends]). This
  // model's gradients are all below by-size's 4 MB, so it runs them on its ring; here the whole path through the
  // nodes (both groups' endpoints, placed and connected); which size goes where, in the next test (a 4 MB gradient
  // on gloo, D = 3) and in test_collective_gloo.
  const dataset d = test::small_blobs(32);
  std::vector<std::unique_ptr<test::node_process>> nodes;
  for (int i = 0; i < 3; ++i) nodes.push_back(std::make_unique<test::node_process>(actorpipe, std::vector<std::string>{"--insecure"}));
  for (int T : {1, 2}) {
    CAPTURE(T);
    pipeline_options o = node_options(nodes, T, 0.1f);
    o.security = test::insecure_transport();
    sequential reference = test::linear_pairs_model();
    local_runner local(reference, o.optimizer, "cross_entropy", o.clip_grad_norm);
    std::vector<sequential> trained;
    for (collective_backend backend : {collective_backend::ring, collective_backend::gloo, collective_backend::by_size}) {
      o.collectives = backend;
      data_parallel_pipeline mesh(test::linear_pairs_model(), o, 2);
      for (int s = 0; s < 3; ++s) {
        const float loss = mesh.train_step(d.inputs, d.labels, static_cast<std::uint64_t>(s));
        if (backend == collective_backend::ring) {
          const float expected = local.train_step(d.inputs, d.labels, static_cast<std::uint64_t>(s));
          CHECK(loss == doctest::Approx(expected).epsilon(1e-5));
        }
      }
      trained.push_back(mesh.first().gather_model());
    }
    test::check_same_parameters(trained[1], trained[0], 0.0f, "gloo against ring");
    test::check_same_parameters(trained[2], trained[0], 0.0f, "by-size against ring");
    test::check_same_parameters(trained[1], reference, 1e-5f, "gloo against one process");
  }
  for (auto& n : nodes) CHECK(n->process().running());
}

TEST_CASE("by-size on nodes sums a gradient of 4 MB on gloo and the smaller ones on the ring (D = 3, where their bits differ)") {
  // The middle Linear's 1024 x 1024 weight is 4 MB, its gradient by-size's first on gloo; every other gradient is
  // smaller (Note [collectives by size]). With three replicas the ring and gloo add their three shares in orders
  // of their own, so their sums differ in the last bits: which engine summed a gradient shows in the parameters
  // one plain SGD step leaves.
  const dataset d = test::small_blobs(48);
  std::vector<std::unique_ptr<test::node_process>> nodes;
  for (int i = 0; i < 3; ++i) nodes.push_back(std::make_unique<test::node_process>(actorpipe, std::vector<std::string>{"--insecure"}));
  const auto model = [] {
    sequential m = sequential::from_layer_specs({"linear:12:1024", "tanh", "linear:1024:1024", "tanh", "linear:1024:4"});
    m.initialize(5);
    return m;
  };
  pipeline_options o = node_options(nodes, 1, 0.0f);
  o.security = test::insecure_transport();
  o.optimizer.kind = "sgd";
  o.optimizer.lr = 0.1f;
  o.layers_per_chunk = {3, 2};
  std::map<collective_backend, std::map<std::string, tensor>> trained;
  for (collective_backend backend : {collective_backend::ring, collective_backend::gloo, collective_backend::by_size}) {
    o.collectives = backend;
    data_parallel_pipeline mesh(model(), o, 3);  // replica d's stage s on node (2d + s) % 3: no two of a stage share one
    REQUIRE(std::isfinite(mesh.train_step(d.inputs, d.labels, 0)));
    sequential m = mesh.first().gather_model();
    trained[backend] = test::parameter_values(m);
  }
  const auto same_bits = [](const tensor& a, const tensor& b) {
    return a.shape() == b.shape() && std::memcmp(a.data(), b.data(), a.byte_size()) == 0;
  };
  int large = 0;
  for (const auto& [name, by_size] : trained[collective_backend::by_size]) {
    CAPTURE(name);
    const tensor& ring = trained[collective_backend::ring].at(name);
    const tensor& gloo = trained[collective_backend::gloo].at(name);
    if (by_size.byte_size() >= by_size_group::default_threshold_bytes) {
      ++large;
      REQUIRE_FALSE(same_bits(ring, gloo));  // else this test could not tell the engines apart
      CHECK(same_bits(by_size, gloo));
    } else if (!same_bits(ring, gloo)) {
      CHECK(same_bits(by_size, ring));
    }
  }
  CHECK(large == 1);
  for (auto& n : nodes) CHECK(n->process().running());
}

TEST_CASE("the gloo and by-size backends are refused beside mutual TLS, before any stage is placed") {
  pipeline_options o = test::pipeline_options_for(2, 2);
  o.security = test::tls_security();
  o.nodes = {"127.0.0.1:1", "127.0.0.1:2"};  // never reached
  for (collective_backend backend : {collective_backend::gloo, collective_backend::by_size}) {
    o.collectives = backend;
    const std::string expected = std::string("the ") + collective_backend_name(backend) +
                                 " collective backend runs gloo, over plain TCP only";
    CHECK_THROWS_WITH_AS(data_parallel_pipeline(test::linear_pairs_model(), o, 2),
                         doctest::Contains(expected.c_str()), std::invalid_argument);
  }
}

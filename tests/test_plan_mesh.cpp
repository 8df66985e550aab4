// The (data, pipeline, tensor) mesh as `train` prints and checks it.
#include <doctest/doctest.h>

#include <stdexcept>

#include "plan/mesh.hpp"
#include "test_support.hpp"

using namespace ap;
using namespace ap::test;

TEST_CASE("describe_mesh counts the compute ranks and places the stages on their nodes") {
  CHECK(describe_mesh(mesh_shape{2, 2, 2}, {}) ==
        "2 data-parallel replicas x 2 stages x 2 tensor-parallel ranks = 8 compute ranks, all in this process");
  CHECK(describe_mesh(mesh_shape{1, 3, 2}, {"127.0.0.1:4000", "127.0.0.1:4001"}) ==
        "1 data-parallel replica x 3 stages x 2 tensor-parallel ranks = 6 compute ranks; stage 0: node "
        "127.0.0.1:4000 (2 ranks), stage 1: node 127.0.0.1:4001 (2 ranks), stage 2: node 127.0.0.1:4000 (2 ranks)");
  CHECK(describe_mesh(mesh_shape{2, 1, 1}, {"a:1", "b:2", "c:3"}) ==
        "2 data-parallel replicas x 1 stage x 1 tensor-parallel rank = 2 compute ranks; replica 0 stage 0: node "
        "a:1 (1 rank), replica 1 stage 0: node b:2 (1 rank)");
  // 3 replicas on 2 nodes, replicas 0 and 2 share a:1 (Note [hierarchical collectives]).
  CHECK(describe_mesh(mesh_shape{3, 1, 1}, {"a:1", "b:2"}) ==
        "3 data-parallel replicas x 1 stage x 1 tensor-parallel rank = 3 compute ranks; replica 0 stage 0: node "
        "a:1 (1 rank), replica 1 stage 0: node b:2 (1 rank), replica 2 stage 0: node a:1 (1 rank); the replicas "
        "of a stage on one node reduce through shared memory first");
}

TEST_CASE("node_of: replica d's stage s on node (d * stages + s) mod nodes") {
  CHECK(node_of(0, 0, 2, 3) == 0);
  CHECK(node_of(0, 1, 2, 3) == 1);
  CHECK(node_of(1, 0, 2, 3) == 2);
  CHECK(node_of(1, 1, 2, 3) == 0);
  CHECK(node_of(3, 1, 2, 2) == 1);
}

TEST_CASE("check_mesh refuses sizes below 1, naming the flag") {
  CHECK(contains(error_of([] { check_mesh(mesh_shape{0, 2, 1}); }), "--data-parallel must be at least 1"));
  CHECK(contains(error_of([] { check_mesh(mesh_shape{1, 2, 0}); }), "--tensor-parallel must be at least 1"));
  CHECK(error_of([] { check_mesh(mesh_shape{2, 2, 2}); }) == "no exception");
}

TEST_CASE("elastic_mesh (Note [elastic mesh]): as many stage slots per node as planned, replicas before stages") {
  const auto any = [](const mesh_shape&) { return true; };
  const auto same = [](const std::optional<mesh_shape>& m, mesh_shape want) {
    REQUIRE(m.has_value());
    CHECK(m->data_parallel == want.data_parallel);
    CHECK(m->stages == want.stages);
    CHECK(m->tensor_parallel == want.tensor_parallel);
  };
  same(elastic_mesh({1, 4, 2}, 4, 3, any), {1, 3, 2});  // a stage a node: one stage fewer, T kept
  same(elastic_mesh({1, 4, 1}, 2, 1, any), {1, 2, 1});  // two stages a node: still two on the one left
  same(elastic_mesh({1, 2, 1}, 4, 2, any), {1, 2, 1});  // two stages on four nodes: two nodes left hold them
  same(elastic_mesh({1, 4, 1}, 4, 4, any), {1, 4, 1});  // every node back: the planned mesh
  same(elastic_mesh({1, 4, 1}, 4, 9, any), {1, 4, 1});  // never larger than planned
  same(elastic_mesh({2, 2, 1}, 4, 3, any), {1, 2, 1});  // replicas go first, the stages stay
  same(elastic_mesh({4, 1, 1}, 4, 3, any), {3, 1, 1});
  // A mesh `fits` refuses gives way to the next smaller one.
  same(elastic_mesh({1, 4, 1}, 4, 3, [](const mesh_shape& m) { return 4 % m.stages == 0; }), {1, 2, 1});
  same(elastic_mesh({3, 2, 1}, 6, 6, [](const mesh_shape& m) { return m.data_parallel != 3; }), {2, 2, 1});
  CHECK_FALSE(elastic_mesh({1, 4, 1}, 4, 0, any).has_value());
  CHECK_FALSE(elastic_mesh({1, 4, 1}, 4, 3, [](const mesh_shape&) { return false; }).has_value());
}

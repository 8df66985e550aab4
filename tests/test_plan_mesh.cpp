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

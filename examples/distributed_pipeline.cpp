// Trains Fashion-MNIST on stages placed on `actorpipe node` processes (CAF's middleman), same code as local.
//   build/cli/actorpipe node --port 0 &   (prints "node listening on 127.0.0.1:PORT"; start one per machine)
//   build/examples/example_distributed_pipeline 127.0.0.1:PORT1 127.0.0.1:PORT2
#include <cstdio>
#include <string>

#include "actors/pipeline.hpp"
#include "data/fashion_mnist.hpp"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s HOST:PORT [HOST:PORT ...]  (addresses of running `actorpipe node`s)\n", argv[0]);
    return 2;
  }
  const ap::dataset train_set = ap::load_fashion_mnist("train");
  const ap::dataset test_set = ap::load_fashion_mnist("test");

  ap::sequential model = ap::sequential::from_spec("784-512-256-128-10");  // 4 blocks, one per stage
  ap::pipeline_options options;
  options.stages = 4;                                        // stage s runs on node s % (number of nodes)
  for (int i = 1; i < argc; ++i) options.nodes.push_back(argv[i]);
  options.microbatches = 8;
  options.schedule = "1f1b";
  ap::pipeline pipe(model, options);                         // connects, checks versions, places the stages

  const std::size_t batch_size = 128;
  const auto order = ap::epoch_order(train_set.size(), /*seed=*/1, /*epoch=*/0);
  double loss_sum = 0.0;
  const std::size_t batches = ap::batch_count(train_set.size(), batch_size);
  for (std::size_t b = 0; b < batches; ++b) {
    const ap::batch bt = ap::make_batch(train_set, order, b, batch_size);
    loss_sum += pipe.train_step(bt.inputs, bt.labels, b);    // throws ap::pipeline_error naming a lost node
  }
  std::printf("epoch 1: mean loss %.4f, test accuracy %.4f\n", loss_sum / batches, ap::evaluate_accuracy(pipe, test_set));
}

// Trains Fashion-MNIST on a 4-stage actor pipeline in one process and prints the loss and test accuracy.
#include <cstdio>

#include "actors/pipeline.hpp"
#include "data/fashion_mnist.hpp"

int main() {
  const ap::dataset train_set = ap::load_fashion_mnist("train");
  const ap::dataset test_set = ap::load_fashion_mnist("test");

  ap::sequential model = ap::sequential::from_spec("784-512-256-128-10");  // 4 blocks: Linear-ReLU x3, Linear
  ap::pipeline_options options;
  options.stages = 4;          // four stages of CAF actors, one block each
  options.microbatches = 8;    // each batch is split into 8 microbatches
  options.schedule = "1f1b";   // one forward, one backward
  options.optimizer.kind = "adam";
  options.optimizer.lr = 1e-3f;
  ap::pipeline pipe(model, options);

  const std::size_t batch_size = 128;
  std::uint64_t step = 0;
  for (std::uint64_t epoch = 0; epoch < 2; ++epoch) {
    const auto order = ap::epoch_order(train_set.size(), /*seed=*/1, epoch);
    double loss_sum = 0.0;
    const std::size_t batches = ap::batch_count(train_set.size(), batch_size);
    for (std::size_t b = 0; b < batches; ++b) {
      const ap::batch bt = ap::make_batch(train_set, order, b, batch_size);
      loss_sum += pipe.train_step(bt.inputs, bt.labels, step++);
    }
    std::printf("epoch %llu: mean loss %.4f\n", static_cast<unsigned long long>(epoch + 1), loss_sum / batches);
  }
  std::printf("test accuracy %.4f\n", ap::evaluate_accuracy(pipe, test_set));
}

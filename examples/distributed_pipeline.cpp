// Trains Fashion-MNIST on stages placed on `actorpipe node` processes (CAF's middleman), same code as local.
//   scripts/make_test_certs.sh certs coordinator node          (a CA and certificates: mutual TLS)
//   build/cli/actorpipe node --port 0 --tls-ca certs/ca.pem --tls-cert certs/node.pem --tls-key certs/node.key &
//       (prints "node listening on 127.0.0.1:PORT"; start one per machine)
//   build/examples/example_distributed_pipeline certs/ca.pem certs/coordinator.pem certs/coordinator.key
//       127.0.0.1:PORT1 127.0.0.1:PORT2   (one command line)
//   (or `--insecure 127.0.0.1:PORT1 ...` against nodes started with --insecure: plain TCP)
#include <cstdio>
#include <string>

#include "actors/pipeline.hpp"
#include "data/fashion_mnist.hpp"

int main(int argc, char** argv) {
  const bool insecure = argc > 1 && std::string(argv[1]) == "--insecure";
  const int first_node = insecure ? 2 : 4;
  if (argc <= first_node) {
    std::fprintf(stderr, "usage: %s (CA.pem CERT.pem KEY.pem | --insecure) HOST:PORT [HOST:PORT ...]"
                         "  (addresses of running `actorpipe node`s)\n", argv[0]);
    return 2;
  }
  const ap::dataset train_set = ap::load_fashion_mnist("train");
  const ap::dataset test_set = ap::load_fashion_mnist("test");

  ap::sequential model = ap::sequential::from_spec("784-512-256-128-10");  // 4 blocks, one per stage
  ap::pipeline_options options;
  options.stages = 4;                                        // stage s runs on node s % (number of nodes)
  for (int i = first_node; i < argc; ++i) options.nodes.push_back(argv[i]);
  options.security.insecure = insecure;                      // else mutual TLS with these files
  if (!insecure) options.security = {argv[1], argv[2], argv[3], false};
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

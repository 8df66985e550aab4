// Your own model on your own data through the engine: --auto picks the mesh, warmup then cosine decay.
//   example_own_data features.npy labels.npy   (float32 (n, d) features, integer (n) labels)
//   example_own_data                           (Gaussian blobs made here, as a data set built in C++)
#include <iostream>

#include "data/open_data.hpp"
#include "data/synthetic.hpp"
#include "engine/engine.hpp"

int main(int argc, char** argv) try {
  ap::data_sets data;
  std::size_t features = 0, classes = 0;
  if (argc == 3) {  // .npy files: the reader checks dtype, shape, lengths, labels and NaNs before any step
    ap::data_config files;
    files.path = argv[1];
    files.labels = argv[2];
    data = ap::open_data(files, /*context=*/0, /*classes=*/0, /*seed=*/1, /*validation_windows=*/0);
    features = data.train->sample_shape().at(0), classes = data.train->num_classes();
  } else {  // any data set in memory (or your own ap::data_source)
    features = 32, classes = 4;
    data.train = ap::memory_source(ap::make_blobs(4096, features, classes, 7));
    data.validation = ap::memory_source(ap::make_blobs(512, features, classes, 8));
  }
  const std::string widths = std::to_string(features) + "-128-64-" + std::to_string(classes);
  ap::sequential model = ap::sequential::from_spec(widths);  // or layers of your own kinds (custom_layer.cpp)

  ap::run_config config;
  config.model = widths;  // names the model in reports and checkpoints
  config.train.epochs = 3;
  config.train.batch_size = 64;
  config.optimizer.kind = "adamw";
  config.optimizer.lr = 3e-3f;
  config.optimizer.schedule.kind = "cosine";  // to min_lr at the run's last step
  config.optimizer.schedule.warmup_steps = 20;
  config.optimizer.schedule.min_lr = 3e-4f;
  config.auto_config = true;  // stages, replicas, threads, ... from measured layer costs and trials
  config.log_file = "own_data_metrics.jsonl";  // one JSON line per step

  ap::engine_callbacks callbacks;
  callbacks.log = [](const std::string& line) { std::cerr << line << "\n"; };
  ap::engine engine(std::move(model), config, data, callbacks);
  const ap::run_result result = engine.run();
  std::cout << "final loss " << result.training.last_loss << ", accuracy " << result.training.test_accuracy
            << ", last lr " << result.last_lr << "\n"
            << ap::config_json(result.config).dump() << "\n";  // what repeats this run: train --config
  return 0;
} catch (const std::exception& e) {
  std::cerr << "error: " << e.what() << "\n";
  return 1;
}

// Your own model on your own data through the engine: --auto picks the mesh, warmup then cosine decay.
//   example_own_data features.npy labels.npy   (float32 (n, d) features, integer (n) labels)
//   example_own_data                           (a data set of your own in C++: points around 4 centres)
#include <cmath>
#include <iostream>

#include "data/open_data.hpp"
#include "engine/engine.hpp"

// A data source of your own: sample i is computed when a batch asks for it (a file, a database, a generator).
// Here: class i % 4, its 32 features a point near the class's centre, the same for the same i.
class clusters final : public ap::data_source {
 public:
  explicit clusters(std::size_t samples, std::uint64_t seed) : samples_(samples), seed_(seed) {}
  std::string name() const override { return "clusters"; }
  std::size_t size() const override { return samples_; }
  std::size_t num_classes() const override { return 4; }
  ap::shape_t sample_shape() const override { return {32}; }
  ap::batch gather(const std::size_t* indices, std::size_t count) const override {
    ap::batch b{ap::tensor::from_shape({count, 32}), ap::tensor::from_shape({count})};
    for (std::size_t r = 0; r < count; ++r) {
      const std::size_t i = indices[r], c = i % 4;
      for (std::size_t f = 0; f < 32; ++f)  // the centre's coordinate, plus a little noise from (seed, i, f)
        b.inputs.data()[r * 32 + f] = (f % 4 == c ? 1.0f : 0.0f) + 0.3f * std::sin(float(seed_ + 31 * i + 7 * f));
      b.labels.data()[r] = float(c);
    }
    return b;
  }

 private:
  std::size_t samples_;
  std::uint64_t seed_;
};

int main(int argc, char** argv) try {
  ap::data_sets data;
  std::size_t features = 0, classes = 0;
  if (argc == 3) {  // .npy files: the reader checks dtype, shape, lengths, labels and NaNs before any step
    ap::data_config files;
    files.path = argv[1];
    files.labels = argv[2];
    data = ap::open_data(files, /*context=*/0, /*classes=*/0, /*seed=*/1, /*validation_windows=*/0);
    features = data.train->sample_shape().at(0), classes = data.train->num_classes();
  } else {  // your own source (an in-memory ap::dataset works too: ap::memory_source)
    features = 32, classes = 4;
    data.train = std::make_shared<clusters>(4096, 7);
    data.validation = std::make_shared<clusters>(512, 8);
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

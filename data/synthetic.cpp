#include "data/synthetic.hpp"

#include <stdexcept>

#include "random/seeded_random.hpp"

namespace ap {

dataset make_blobs(std::size_t samples, std::size_t features, std::size_t classes, std::uint64_t seed) {
  if (classes == 0 || features == 0)
    throw std::invalid_argument("make_blobs: need at least one class and one feature, got " +
                                std::to_string(classes) + " classes and " + std::to_string(features) +
                                " features");
  splitmix64 gen(mix_seed(seed, 0x626c6f6273ULL));  // "blobs": a different stream from epoch_order's

  std::vector<double> centres(classes * features);  // (classes, features) in [-2, 2)
  for (double& c : centres) c = -2.0 + 4.0 * gen.uniform();

  dataset d;
  d.name = "blobs";
  d.num_classes = classes;
  d.inputs = tensor::from_shape({samples, features});
  d.labels = tensor::from_shape({samples});
  float* x = d.inputs.data();
  for (std::size_t i = 0; i < samples; ++i) {
    const std::size_t label = i % classes;  // round-robin: counts differ by at most one
    d.labels.data()[i] = static_cast<float>(label);
    for (std::size_t f = 0; f < features; ++f)
      x[i * features + f] = static_cast<float>(centres[label * features + f] + 0.5 * gen.normal());
  }
  return d;
}

}  // namespace ap

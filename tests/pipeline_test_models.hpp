// Small models and data shared by the pipeline tests.
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "actors/pipeline.hpp"
#include "data/synthetic.hpp"
#include "equivalence.hpp"
#include "model/sequential.hpp"
#include "random/seeded_random.hpp"

namespace ap::test {

// Nine layers with every kind that has parameters or randomness: enough for 4 stages x 2 chunks.
inline sequential nine_layer_model(std::uint64_t seed = 7) {
  sequential m;
  for (const char* spec : {"linear:12:16", "layernorm:16", "gelu", "dropout:0.2:11", "linear:16:16", "tanh",
                           "linear:16:16", "relu", "linear:16:4"})
    m.add(make_layer(spec));
  m.initialize(seed);
  return m;
}

// Six elements, five of them blocks (residual ones holding LayerNorm, GELU, Dropout, Tanh): stages hold
// whole blocks; a block first makes stage 0 run a block's inner backward_input without its dx.
inline sequential residual_block_model(std::uint64_t seed = 7) {
  sequential m;
  for (const char* spec : {"block[linear:12:16,gelu]", "residual[layernorm:16,linear:16:24,gelu,dropout:0.1:3,linear:24:16]",
                           "residual[layernorm:16,linear:16:16,tanh]", "block[linear:16:16,relu]",
                           "residual[layernorm:16,linear:16:32,gelu,linear:32:16]", "linear:16:4"})
    m.add(make_layer(spec));
  m.initialize(seed);
  return m;
}

// Linear layers that pair up (Note [Megatron pairing]) within a 2-stage split {4, 7}: 12 -> 16 -> 24 -> 16 ->
// 32 -> 16 -> 4, every width divisible by 2 and 4 (tensor-parallel tests).
inline sequential linear_pairs_model(std::uint64_t seed = 7) {
  sequential m = sequential::from_layer_specs({"linear:12:16", "relu", "linear:16:24", "gelu", "linear:24:16", "tanh",
                                               "linear:16:32", "relu", "linear:32:16", "relu", "linear:16:4"});
  m.initialize(seed);
  return m;
}

inline optimizer_config adam_optimizer(float lr = 1e-2f) {
  optimizer_config o;
  o.kind = "adam";
  o.lr = lr;
  return o;
}

// The pipeline_options the tests build: `stages` stages of `chunks` chunks each, `microbatches` microbatches, on
// `schedule`, with `optimizer`; the rest as pipeline_options has them, for the caller to set.
inline pipeline_options pipeline_options_for(int stages, int microbatches = pipeline_options{}.microbatches,
                                             const std::string& schedule = pipeline_options{}.schedule,
                                             int chunks = 1, const optimizer_config& optimizer = optimizer_config{}) {
  pipeline_options o;
  o.stages = stages;
  o.microbatches = microbatches;
  o.schedule = schedule;
  o.chunks_per_stage = chunks;
  o.optimizer = optimizer;
  return o;
}

// `o` with its stages on `nodes` and `security` between the processes.
inline pipeline_options on_nodes(pipeline_options o, std::vector<std::string> nodes, const transport_security& security) {
  o.nodes = std::move(nodes);
  o.security = security;
  return o;
}

// Windows of token ids spread over [0, vocabulary) (ids above 255 too): inputs and next-token labels.
inline dataset token_batch(std::size_t vocabulary, std::size_t context, std::size_t count, std::uint64_t seed) {
  dataset d;
  d.inputs = tensor::from_shape({count, context});
  d.labels = tensor::from_shape({count, context});
  splitmix64 random(seed);
  std::vector<float> ids(count * (context + 1));
  for (float& v : ids) v = float(random.next() % vocabulary);
  for (std::size_t b = 0; b < count; ++b)
    for (std::size_t t = 0; t < context; ++t) {
      d.inputs.data()[b * context + t] = ids[b * (context + 1) + t];
      d.labels.data()[b * context + t] = ids[b * (context + 1) + t + 1];
    }
  d.num_classes = vocabulary;
  return d;
}

inline dataset small_blobs(std::size_t samples = 48) { return make_blobs(samples, 12, 4, 3); }

inline std::map<std::string, tensor> parameter_values(sequential& m) {
  std::map<std::string, tensor> out;
  for (auto& p : m.parameters()) out[p.name] = *p.value;
  return out;
}

// The text of the pipeline_error a train step throws ("" if it succeeds) and how long the step took.
struct step_failure {
  std::string message;
  double seconds = 0.0;
};
template <class Pipeline>
step_failure failed_step(Pipeline& pipe, const dataset& d, std::uint64_t step) {
  step_failure f;
  const auto t0 = std::chrono::steady_clock::now();
  try {
    pipe.train_step(d.inputs, d.labels, step);
  } catch (const pipeline_error& e) {
    f.message = e.what();
  }
  f.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return f;
}

// 48 samples in batches of 10: five batches per epoch (the last of 8), three epochs, 15 steps.
inline train_config small_train_config() {
  train_config c;
  c.epochs = 3;
  c.batch_size = 10;
  c.seed = 5;
  return c;
}

}  // namespace ap::test

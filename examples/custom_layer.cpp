// A user-defined layer (a learned per-feature scale) and a user-defined loss (label-smoothed cross-entropy),
// each registered by name, trained on a 2-stage pipeline in one process and on 2 nodes.
//   build/examples/example_custom_layer                           trains in one process: single, then 2 stages
//   build/examples/example_custom_layer node --port 0 TLS &       a node that knows feature_scale (run two)
//   build/examples/example_custom_layer TLS 127.0.0.1:P1 127.0.0.1:P2   trains on those nodes too, and compares
// where TLS is --tls-ca CA.pem --tls-cert CERT.pem --tls-key KEY.pem (scripts/make_test_certs.sh), or --insecure.
// The loss runs in the coordinator's process only (Note [the user's loss] in model/loss.hpp): the nodes
// need the layer, not the loss.
// A node builds layers by name from their spec texts, so it must be a binary with the layer linked in: this
// one is its own node (`node` argument, ap::run_node). `actorpipe node` would refuse the model at set-up,
// naming the kind 'feature_scale' and the node.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "actors/pipeline.hpp"
#include "actors/run_node.hpp"
#include "data/synthetic.hpp"
#include "model/layer_registry.hpp"
#include "model/loss.hpp"

// ---- the user's layer: y = x * scale, one learned scale per feature -------------------------------------
class feature_scale final : public ap::layer {
 public:
  explicit feature_scale(std::size_t width) : scale_(ap::zeros({width})), dscale_(ap::zeros({width})) { initialize(0); }

  std::string describe() const override { return "FeatureScale(" + std::to_string(scale_.size()) + ")"; }
  std::string spec() const override { return "feature_scale:" + std::to_string(scale_.size()); }
  std::optional<std::size_t> in_features() const override { return scale_.size(); }
  std::optional<std::size_t> out_features() const override { return scale_.size(); }
  std::unique_ptr<ap::layer> clone() const override { return std::make_unique<feature_scale>(*this); }
  void initialize(std::uint64_t) override { std::fill(scale_.begin(), scale_.end(), 1.0f); }
  std::vector<ap::parameter> parameters(const std::string& prefix) override {
    return {{prefix + "scale", &scale_, &dscale_}};  // named like "2.scale": checkpoints and nodes see it
  }

  // What forward keeps for backward, owned by the caller (one per microbatch in flight).
  struct saved : ap::saved_state {
    ap::tensor x;  // (rows, width)
    std::size_t bytes() const override { return x.byte_size(); }  // activation memory, counted per stage
  };

  ap::tensor forward(const ap::tensor& x, ap::layer_cache& cache, const ap::forward_context&) const override {
    const std::size_t w = scale_.size(), n = ap::rows(x);
    ap::tensor y = ap::tensor::from_shape(ap::shape_of(x));
    for (std::size_t r = 0; r < n; ++r)
      for (std::size_t i = 0; i < w; ++i) y.data()[r * w + i] = x.data()[r * w + i] * scale_.data()[i];
    cache.emplace<saved>().x = x;
    return y;
  }
  // I: dx += dy * scale (accumulate: the caller may sum several paths into dx).
  void backward_input(const ap::tensor& dy, ap::layer_cache& cache, ap::tensor* dx) const override {
    const saved& s = cache.get<saved>(*this);
    if (!dx) return;
    float* pdx = ap::accumulate_into(*dx, ap::shape_of(s.x), *this);
    const std::size_t w = scale_.size();
    for (std::size_t k = 0; k < dy.size(); ++k) pdx[k] += dy.data()[k] * scale_.data()[k % w];
  }
  // W: dscale += sum over rows of dy * x.
  void backward_weight(const ap::tensor& dy, ap::layer_cache& cache) override {
    const saved& s = cache.get<saved>(*this);
    const std::size_t w = scale_.size();
    for (std::size_t k = 0; k < dy.size(); ++k) dscale_.data()[k % w] += dy.data()[k] * s.x.data()[k];
  }

 private:
  ap::tensor scale_;   // (width)
  ap::tensor dscale_;  // (width)
};

// "feature_scale:WIDTH" -> the layer; from now on make_layer, Sequential, the pipeline and nodes know it.
static const ap::layer_kind_registration feature_scale_kind{"feature_scale", [](const ap::layer_spec& s) {
  s.expect_fields(1, "feature_scale:WIDTH");
  return std::make_unique<feature_scale>(s.width(0));
}};

// ---- the user's loss: cross-entropy against labels smoothed by epsilon --------------------------------------
// Per row: -sum_i q_i log softmax(x)_i with q = (1 - eps) one_hot(label) + eps / classes; its gradient is
// softmax(x) - q. Divided by batch_size when it is given (Note [loss scaling]): the microbatches of a
// pipeline then sum to the batch's loss and gradient, as with the built-in losses.
class smoothed_cross_entropy final : public ap::loss {
 public:
  std::string name() const override { return "smoothed_cross_entropy"; }
  float compute_loss(const ap::tensor& output, const ap::tensor& target, std::size_t batch_size = 0) const override {
    double total = 0.0;
    for_rows(output, target, [&](const float*, std::size_t c, std::size_t label, const std::vector<double>& p) {
      for (std::size_t i = 0; i < c; ++i) total -= smoothed(i, label, c) * std::log(std::max(p[i], 1e-30));
    });
    return static_cast<float>(total / divisor(output, batch_size));
  }
  ap::tensor compute_gradient(const ap::tensor& output, const ap::tensor& target,
                              std::size_t batch_size = 0) const override {
    ap::tensor grad = ap::tensor::from_shape(ap::shape_of(output));
    const float scale = 1.0f / static_cast<float>(divisor(output, batch_size));
    std::size_t r = 0;
    for_rows(output, target, [&](const float*, std::size_t c, std::size_t label, const std::vector<double>& p) {
      for (std::size_t i = 0; i < c; ++i) grad.data()[r * c + i] = static_cast<float>(p[i] - smoothed(i, label, c)) * scale;
      ++r;
    });
    return grad;
  }
  std::size_t batch_rows(const ap::tensor& target) const override { return target.size(); }

 private:
  static constexpr double eps = 0.1;
  static double smoothed(std::size_t i, std::size_t label, std::size_t c) {
    return (i == label ? 1.0 - eps : 0.0) + eps / static_cast<double>(c);
  }
  static double divisor(const ap::tensor& output, std::size_t batch_size) {
    return static_cast<double>(batch_size ? batch_size : ap::rows(output));
  }
  // f(row, classes, label, softmax of the row) for every row; refuses labels that do not fit.
  template <class F>
  static void for_rows(const ap::tensor& output, const ap::tensor& target, F f) {
    const std::size_t n = ap::rows(output), c = ap::cols(output);
    if (target.size() != n) throw std::invalid_argument("smoothed_cross_entropy: one label per output row");
    std::vector<double> p(c);
    for (std::size_t r = 0; r < n; ++r) {
      const float* x = output.data() + r * c;
      const float label = target.data()[r];
      if (!(label >= 0.0f && label < static_cast<float>(c)))
        throw std::invalid_argument("smoothed_cross_entropy: label " + std::to_string(label) + " in row " +
                                    std::to_string(r) + " is not a class of " + std::to_string(c));
      const double max = *std::max_element(x, x + c);
      double sum = 0.0;
      for (std::size_t i = 0; i < c; ++i) sum += p[i] = std::exp(static_cast<double>(x[i]) - max);
      for (double& v : p) v /= sum;
      f(x, c, static_cast<std::size_t>(label), p);
    }
  }
};

// "smoothed_cross_entropy" -> the loss; from now on every runner can be given it by name.
static const ap::loss_registration smoothed_loss{"smoothed_cross_entropy",
                                                 [] { return std::make_unique<smoothed_cross_entropy>(); }};

// ---- training -----------------------------------------------------------------------------------------
ap::sequential make_model() {
  ap::sequential model = ap::sequential::from_layer_specs(
      {"linear:8:32", "feature_scale:32", "gelu", "residual[layernorm:32,linear:32:32,feature_scale:32]", "linear:32:3"});
  model.initialize(/*seed=*/1);
  return model;
}

// llm.c's loop: one train_step is forward, backward and update; print the loss.
template <class Runner>
float train(const char* name, Runner& runner, const ap::dataset& data, int steps) {
  float loss = 0.0f;
  for (int step = 0; step < steps; ++step) {
    loss = runner.train_step(data.inputs, data.labels, step);
    std::printf("%s step %d: loss %.6f\n", name, step, loss);
  }
  return loss;
}

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "node") return ap::run_node(argc, argv);  // this binary as a node

  const ap::dataset data = ap::make_blobs(/*samples=*/64, /*features=*/8, /*classes=*/3, /*seed=*/2);
  const int steps = 5;
  ap::optimizer_config adam;
  adam.kind = "adam";
  adam.lr = 0.01f;

  ap::sequential single_model = make_model();
  ap::local_runner single(single_model, adam, "smoothed_cross_entropy");
  const float single_loss = train("single", single, data, steps);

  ap::pipeline_options options;
  options.stages = 2;
  options.microbatches = 4;
  options.schedule = "1f1b";
  options.optimizer = adam;
  options.loss = "smoothed_cross_entropy";  // computed by the coordinator, microbatch by microbatch
  ap::pipeline local(make_model(), options);
  const float local_loss = train("2 stages", local, data, steps);

  float nodes_loss = local_loss;
  if (argc > 1) {
    for (int i = 1; i < argc; ++i) {
      const std::string arg = argv[i];
      if (arg == "--insecure") options.security.insecure = true;  // plain TCP, as the nodes were started
      else if (arg == "--tls-ca" && i + 1 < argc) options.security.ca_file = argv[++i];
      else if (arg == "--tls-cert" && i + 1 < argc) options.security.certificate_file = argv[++i];
      else if (arg == "--tls-key" && i + 1 < argc) options.security.key_file = argv[++i];
      else options.nodes.push_back(arg);  // stage s runs on node s % nodes
    }
    try {
      ap::pipeline remote(make_model(), options);  // refused here if a node lacks feature_scale
      nodes_loss = train("2 nodes", remote, data, steps);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "error: %s\n", e.what());
      return 1;
    }
  }
  const bool same = std::fabs(local_loss - single_loss) <= 1e-5f * std::fabs(single_loss) &&
                    std::fabs(nodes_loss - single_loss) <= 1e-5f * std::fabs(single_loss);
  std::printf("final loss: single %.6f, 2 stages %.6f, 2 nodes %s: %s\n", single_loss, local_loss,
              argc > 1 ? std::to_string(nodes_loss).c_str() : "(not run)", same ? "the same" : "DIFFERENT");
  return same ? 0 : 1;
}

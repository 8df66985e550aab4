// A user-defined layer (a learned per-feature scale) registered by name, trained on a 2-stage pipeline in one process and on 2 nodes.
//   build/examples/example_custom_layer                           trains in one process: single, then 2 stages
//   build/examples/example_custom_layer node --port 0 TLS &       a node that knows feature_scale (run two)
//   build/examples/example_custom_layer TLS 127.0.0.1:P1 127.0.0.1:P2   trains on those nodes too, and compares
// where TLS is --tls-ca CA.pem --tls-cert CERT.pem --tls-key KEY.pem (scripts/make_test_certs.sh), or --insecure.
// A node builds layers by name from their spec texts, so it must be a binary with the layer linked in: this
// one is its own node (`node` argument, ap::run_node). `actorpipe node` would refuse the model at set-up,
// naming the kind 'feature_scale' and the node.
#include <cmath>
#include <cstdio>
#include <string>

#include "actors/pipeline.hpp"
#include "actors/run_node.hpp"
#include "data/synthetic.hpp"
#include "model/layer_registry.hpp"

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
  ap::local_runner single(single_model, adam);
  const float single_loss = train("single", single, data, steps);

  ap::pipeline_options options;
  options.stages = 2;
  options.microbatches = 4;
  options.schedule = "1f1b";
  options.optimizer = adam;
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

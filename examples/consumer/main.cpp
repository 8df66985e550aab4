// A user's own layer (softsign) trained on a 2-stage pipeline: in this process, or on 2 nodes that are this
// very binary. `consumer` trains in-process; `consumer node --port 0` is a node; `consumer HOST:PORT ...` trains on nodes.
#include <actorpipe/actors/pipeline.hpp>
#include <actorpipe/actors/run_node.hpp>
#include <actorpipe/data/synthetic.hpp>
#include <actorpipe/model/layer_registry.hpp>
#include <actorpipe/version.hpp>
#include <cmath>
#include <cstdio>
#include <string>

// y = x / (1 + |x|), so dy/dx = 1 / (1 + |x|)^2.
struct softsign final : ap::layer {
  struct saved : ap::saved_state {
    ap::tensor x;  // (rows, features)
    std::size_t bytes() const override { return x.byte_size(); }
  };
  std::string describe() const override { return "Softsign"; }
  std::string spec() const override { return "softsign"; }
  std::unique_ptr<ap::layer> clone() const override { return std::make_unique<softsign>(*this); }
  ap::tensor forward(const ap::tensor& x, ap::layer_cache& cache, const ap::forward_context&) const override {
    ap::tensor y = ap::tensor::from_shape(ap::shape_of(x));
    for (std::size_t i = 0; i < x.size(); ++i) y.data()[i] = x.data()[i] / (1 + std::fabs(x.data()[i]));
    cache.emplace<saved>().x = x;
    return y;
  }
  void backward_input(const ap::tensor& dy, ap::layer_cache& cache, ap::tensor* dx) const override {
    const ap::tensor& x = cache.get<saved>(*this).x;
    if (!dx) return;
    float* out = ap::accumulate_into(*dx, ap::shape_of(x), *this);  // accumulate: dx += ...
    for (std::size_t i = 0; i < x.size(); ++i) out[i] += dy.data()[i] / std::pow(1 + std::fabs(x.data()[i]), 2.0f);
  }
};
static const ap::layer_kind_registration softsign_kind{"softsign", [](const ap::layer_spec& s) {
  s.expect_fields(0, "softsign");
  return std::make_unique<softsign>();
}};

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "node") return ap::run_node(argc, argv);  // this binary as a node
  std::printf("actorpipe %s, wire protocol %d\n", ACTORPIPE_VERSION_STRING, ACTORPIPE_WIRE_PROTOCOL_VERSION);
  const ap::dataset data = ap::make_blobs(/*samples=*/64, /*features=*/8, /*classes=*/3, /*seed=*/2);
  ap::sequential model = ap::sequential::from_layer_specs({"linear:8:32", "softsign", "linear:32:3"});
  model.initialize(/*seed=*/1);
  ap::pipeline_options options;
  options.stages = 2;
  options.microbatches = 4;
  options.schedule = "1f1b";
  for (int i = 1; i < argc; ++i) {  // [--tls-ca CA --tls-cert CERT --tls-key KEY | --insecure] HOST:PORT...
    const std::string a = argv[i];
    if (a == "--insecure") options.security.insecure = true;
    else if (a == "--tls-ca" && i + 1 < argc) options.security.ca_file = argv[++i];
    else if (a == "--tls-cert" && i + 1 < argc) options.security.certificate_file = argv[++i];
    else if (a == "--tls-key" && i + 1 < argc) options.security.key_file = argv[++i];
    else options.nodes.push_back(a);  // stage s on node s % nodes; none: here
  }
  try {
    ap::pipeline pipe(model, options);
    for (int step = 0; step < 5; ++step) std::printf("step %d: loss %.6f\n", step, pipe.train_step(data.inputs, data.labels, step));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}

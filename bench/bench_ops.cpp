// bench_ops: every op outside the big GEMMs, timed alone on 1, 2, 4, ... and all of this machine's threads
// (the calling thread's intra-op threads, set_compute_threads), with the parallel efficiency t1 / (n * tn).
// Shapes: the 4-layer GPT (gpt:layers=4,dim=256,heads=8,context=128, batch 64: 8192 rows x 256) and the heavy
// MLP (784-2048-2048-2048-10, batch 1024). Forward and backward are timed apart where an op has both
// (backward = backward_input + backward_weight). Last, the memory system's own scaling (Note [bandwidth ceiling]) and
// a team's start and end (Note [a team's start and end]).
//
// Note [timing under load] (bench_single_process.cpp): each figure is the median of --repeats runs after one
// warm-up; the load average is printed beside the table. Compare figures of one run only.
//
// Usage: bench_ops [--repeats N] [--only NAME-SUBSTRING] [--threads 1,2,...]
// Prints a table, then one JSON line.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/bench_support.hpp"
#include "model/attention.hpp"
#include "model/gelu.hpp"
#include "model/grad_clip.hpp"
#include "model/layer_norm.hpp"
#include "model/loss.hpp"
#include "model/optimizer.hpp"
#include "model/position_embedding.hpp"
#include "model/relu.hpp"
#include "model/sequential.hpp"
#include "model/token_embedding.hpp"
#include "random/seeded_random.hpp"
#include "tensor/bfloat16.hpp"
#include "tensor/compute.hpp"
#if __has_include("tensor/elementwise.hpp")
#include "tensor/elementwise.hpp"
#define AP_HAVE_ELEMENTWISE 1
#endif

using namespace ap;

namespace {

using clock_type = std::chrono::steady_clock;

tensor random_tensor(const shape_t& shape, std::uint64_t seed, float scale = 1.0f) {
  tensor t = tensor::from_shape(shape);
  splitmix64 random(seed);
  for (float& v : t) v = symmetric_unit_float(random.next()) * scale;
  return t;
}

tensor labels(std::size_t n, std::size_t classes, std::uint64_t seed) {
  tensor t = tensor::from_shape({n});
  splitmix64 random(seed);
  for (float& v : t) v = float(random.next() % classes);
  return t;
}

tensor token_ids(const shape_t& shape, std::size_t vocabulary, std::uint64_t seed) {
  tensor t = tensor::from_shape(shape);
  splitmix64 random(seed);
  for (float& v : t) v = float(random.next() % vocabulary);
  return t;
}

// The residual add x + f(x) of model/block.cpp (h += x), and its backward dx += dy.
void residual_add(float* h, const float* x, std::size_t n) {
#ifdef AP_HAVE_ELEMENTWISE
  add_into(h, x, n);
#else
  for (std::size_t i = 0; i < n; ++i) h[i] += x[i];  // block.cpp's loop before it was parallel
#endif
}

struct op_case {
  std::string name;   // "layer_norm.forward"
  std::string shape;  // "8192x256"
  std::function<void()> setup;  // untimed, before each repeat (may be empty); a backward's runs its forward
  std::function<void()> run;    // timed
  bool ceiling = false;         // the memory's own scaling, not an op (Note [bandwidth ceiling])
};

struct timing {
  double median, best;  // ms
};

timing time_ms(const op_case& c, int repeats) {
  std::vector<double> ms;
  for (int r = 0; r <= repeats; ++r) {  // run 0 warms up (oneDNN primitives, caches, first touch)
    if (c.setup) c.setup();
    // The team is woken before the clock starts: in training an op follows another on a team that is awake,
    // while an untimed set-up on one thread lets it fall asleep (a wake-up costs ~0.1-0.4 ms on this VM,
    // more than the small ops themselves).
#pragma omp parallel
    { }
    const auto start = clock_type::now();
    c.run();
    const double t = std::chrono::duration<double, std::milli>(clock_type::now() - start).count();
    if (r > 0) ms.push_back(t);
  }
  return {bench::median(ms), *std::min_element(ms.begin(), ms.end())};
}

std::vector<int> default_threads() {
  const int all = single_process_threads();
  std::vector<int> out;
  for (int n = 1; n < all; n *= 2) out.push_back(n);
  out.push_back(all);
  return out;
}

std::vector<int> parse_threads(const std::string& text) {
  std::vector<int> out;
  std::size_t start = 0;
  while (start < text.size()) {
    const std::size_t comma = text.find(',', start);
    out.push_back(std::stoi(text.substr(start, comma - start)));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  int repeats = 9;
  std::string only;
  std::vector<int> threads = default_threads();
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--repeats" && i + 1 < argc) repeats = std::stoi(argv[++i]);
    else if (a == "--only" && i + 1 < argc) only = argv[++i];
    else if (a == "--threads" && i + 1 < argc) threads = parse_threads(argv[++i]);
    else {
      std::fprintf(stderr, "usage: bench_ops [--repeats N] [--only NAME] [--threads 1,2,...]\n");
      return 2;
    }
  }

  keep_tensor_memory();  // as `actorpipe` does: buffers come back from the heap, not faulted in afresh each op

  // The GPT's shapes: B 64, T 128, D 256, H 8, vocabulary 256; the MLP's hidden width 4 D.
  const std::size_t B = 64, T = 128, D = 256, H = 8, V = 256, rows = B * T;
  // The heavy MLP's: batch 1024, widths 784-2048-2048-2048-10.
  const std::size_t mb = 1024, hidden = 2048, classes = 10;
  const forward_context ctx;
  std::vector<op_case> cases;

  // Attention (the whole layer: QKV and output projections, heads, softmax) and its heads alone.
  causal_self_attention attention(D, H);
  attention.initialize(1);
  const tensor att_x = random_tensor({B, T, D}, 2);
  const tensor att_dy = random_tensor({B, T, D}, 3, 0.01f);
  layer_cache att_cache;
  tensor att_dx;
  cases.push_back({"attention.forward", "64x128x256 h8", nullptr, [&] { attention.forward(att_x, att_cache, ctx); }});
  cases.push_back({"attention.backward", "64x128x256 h8", [&] { att_dx = tensor{}, attention.forward(att_x, att_cache, ctx); },
                   [&] {
                     attention.backward_input(att_dy, att_cache, &att_dx);
                     attention.backward_weight(att_dy, att_cache);
                   }});
  const tensor qkv = random_tensor({B, T, 3 * D}, 4);
  const tensor heads_dy = random_tensor({B, T, D}, 5, 0.01f);
  attention_heads heads_saved;
  tensor heads_dqkv;
  cases.push_back({"attention_heads.forward", "64x128x768 h8", nullptr,
                   [&] { attention_heads_forward(qkv, H, dtype::float32, heads_saved); }});
  cases.push_back({"attention_heads.backward", "64x128x768 h8",
                   [&] { attention_heads_forward(qkv, H, dtype::float32, heads_saved); },
                   [&] { attention_heads_backward(heads_dy, H, heads_saved, heads_dqkv); }});
  tensor scores = tensor::from_shape({B * H, T, T});
  const tensor scores_in = random_tensor({B * H, T, T}, 6, 4.0f);
  cases.push_back({"causal_softmax", "512x128x128", [&] { std::memcpy(scores.data(), scores_in.data(), scores.byte_size()); },
                   [&] { causal_softmax_rows(scores.data(), B * H * T, T); }});

  // Layer norm over (8192, 256).
  layer_norm norm(D);
  const tensor ln_x = random_tensor({rows, D}, 7);
  const tensor ln_dy = random_tensor({rows, D}, 8, 0.01f);
  layer_cache ln_cache;
  tensor ln_dx;
  cases.push_back({"layer_norm.forward", "8192x256", nullptr, [&] { norm.forward(ln_x, ln_cache, ctx); }});
  cases.push_back({"layer_norm.backward", "8192x256", [&] { ln_dx = tensor{}, norm.forward(ln_x, ln_cache, ctx); },
                   [&] {
                     norm.backward_input(ln_dy, ln_cache, &ln_dx);
                     norm.backward_weight(ln_dy, ln_cache);
                   }});

  // GELU on the GPT's MLP hidden (8192, 1024); ReLU on the heavy MLP's (1024, 2048).
  gelu gelu_layer;
  const tensor gelu_x = random_tensor({rows, 4 * D}, 9, 3.0f);
  const tensor gelu_dy = random_tensor({rows, 4 * D}, 10, 0.01f);
  layer_cache gelu_cache;
  tensor gelu_dx;
  cases.push_back({"gelu.forward", "8192x1024", nullptr, [&] { gelu_layer.forward(gelu_x, gelu_cache, ctx); }});
  cases.push_back({"gelu.backward", "8192x1024", [&] { gelu_dx = tensor{}, gelu_layer.forward(gelu_x, gelu_cache, ctx); },
                   [&] { gelu_layer.backward_input(gelu_dy, gelu_cache, &gelu_dx); }});
  relu relu_layer;
  const tensor relu_x = random_tensor({mb, hidden}, 11);
  const tensor relu_dy = random_tensor({mb, hidden}, 12, 0.01f);
  layer_cache relu_cache;
  tensor relu_dx;
  cases.push_back({"relu.forward", "1024x2048", nullptr, [&] { relu_layer.forward(relu_x, relu_cache, ctx); }});
  cases.push_back({"relu.backward", "1024x2048", [&] { relu_dx = tensor{}, relu_layer.forward(relu_x, relu_cache, ctx); },
                   [&] { relu_layer.backward_input(relu_dy, relu_cache, &relu_dx); }});

  // Embeddings: token (vocabulary 256) and position (context 128), and their gradients.
  token_embedding tokens(V, D);
  tokens.initialize(13);
  const tensor ids = token_ids({B, T}, V, 14);
  const tensor emb_dy = random_tensor({B, T, D}, 15, 0.01f);
  layer_cache tok_cache;
  cases.push_back({"token_embedding.forward", "64x128 -> 256", nullptr, [&] { tokens.forward(ids, tok_cache, ctx); }});
  cases.push_back({"token_embedding.backward", "64x128 -> 256", [&] { tokens.forward(ids, tok_cache, ctx); }, [&] {
                     tensor none;
                     tokens.backward_input(emb_dy, tok_cache, &none);
                     tokens.backward_weight(emb_dy, tok_cache);
                   }});
  position_embedding positions(T, D);
  positions.initialize(16);
  const tensor pos_x = random_tensor({B, T, D}, 17);
  layer_cache pos_cache;
  tensor pos_dx;
  cases.push_back({"position_embedding.forward", "64x128x256", nullptr, [&] { positions.forward(pos_x, pos_cache, ctx); }});
  cases.push_back({"position_embedding.backward", "64x128x256", [&] { pos_dx = tensor{}, positions.forward(pos_x, pos_cache, ctx); },
                   [&] {
                     positions.backward_input(emb_dy, pos_cache, &pos_dx);
                     positions.backward_weight(emb_dy, pos_cache);
                   }});

  // Cross-entropy: the GPT's logits (8192, 256) and the MLP's (1024, 10); loss and gradient.
  softmax_cross_entropy xent;
  const tensor logits = random_tensor({rows, V}, 18, 3.0f);
  const tensor logit_labels = labels(rows, V, 19);
  const tensor mlp_logits = random_tensor({mb, classes}, 20, 3.0f);
  const tensor mlp_labels = labels(mb, classes, 21);
  cases.push_back({"cross_entropy.loss", "8192x256", nullptr, [&] { xent.compute_loss(logits, logit_labels, rows); }});
  cases.push_back({"cross_entropy.gradient", "8192x256", nullptr,
                   [&] { xent.compute_gradient(logits, logit_labels, rows); }});
  cases.push_back({"cross_entropy.loss", "1024x10", nullptr, [&] { xent.compute_loss(mlp_logits, mlp_labels, mb); }});
  cases.push_back({"cross_entropy.gradient", "1024x10", nullptr,
                   [&] { xent.compute_gradient(mlp_logits, mlp_labels, mb); }});

  // Residual add (forward h += x, backward dx += dy: the same loop) over (8192, 256).
  tensor res_h = random_tensor({rows, D}, 22);
  const tensor res_x = random_tensor({rows, D}, 23);
  cases.push_back({"residual_add", "8192x256", nullptr, [&] { residual_add(res_h.data(), res_x.data(), res_h.size()); }});

  // Optimizers, gradient clipping over every parameter of the two models.
  sequential gpt = sequential::from_spec("gpt:layers=4,dim=256,heads=8,context=128");
  sequential mlp = sequential::from_spec("784-2048-2048-2048-10");
  std::size_t gpt_count = 0, mlp_count = 0;
  for (auto [model, count] : {std::pair{&gpt, &gpt_count}, std::pair{&mlp, &mlp_count}}) {
    std::uint64_t seed = 100;
    for (const parameter& p : model->parameters()) {
      *p.grad = random_tensor(shape_of(*p.grad), seed++, 0.01f);
      *count += p.value->size();
    }
  }
  const std::string gpt_params = std::to_string(gpt_count) + " params", mlp_params = std::to_string(mlp_count) + " params";
  optimizer_config adamw_config;
  adamw_config.kind = "adamw";
  adamw_config.weight_decay = 0.01f;
  optimizer_config sgd_config;
  sgd_config.kind = "sgd";
  sgd_config.lr = 1e-4f;
  sgd_config.momentum = 0.9f;
  auto gpt_adamw = make_optimizer(adamw_config), mlp_adamw = make_optimizer(adamw_config);
  auto gpt_sgd = make_optimizer(sgd_config), mlp_sgd = make_optimizer(sgd_config);
  cases.push_back({"adamw.step", "gpt " + gpt_params, nullptr, [&] { gpt_adamw->step(gpt.parameters()); }});
  cases.push_back({"adamw.step", "mlp " + mlp_params, nullptr, [&] { mlp_adamw->step(mlp.parameters()); }});
  cases.push_back({"sgd_momentum.step", "mlp " + mlp_params, nullptr, [&] { mlp_sgd->step(mlp.parameters()); }});
  cases.push_back({"sgd_momentum.step", "gpt " + gpt_params, nullptr, [&] { gpt_sgd->step(gpt.parameters()); }});
  cases.push_back({"grad_norm", "gpt " + gpt_params, nullptr, [&] { gradient_square_sum(gpt.parameters()); }});
  cases.push_back({"grad_norm", "mlp " + mlp_params, nullptr, [&] { gradient_square_sum(mlp.parameters()); }});
  cases.push_back({"grad_scale", "mlp " + mlp_params, nullptr, [&] { scale_gradients(mlp.parameters(), 0.999f); }});

  // bf16 <-> fp32: the GPT's activations (8192, 256) and the MLP's (1024, 2048).
  const tensor conv_a = random_tensor({rows, D}, 24), conv_b = random_tensor({mb, hidden}, 25);
  std::vector<bfloat16> half_a(conv_a.size()), half_b(conv_b.size());
  std::vector<float> back_a(conv_a.size()), back_b(conv_b.size());
  to_bfloat16(conv_a.data(), half_a.data(), conv_a.size());
  to_bfloat16(conv_b.data(), half_b.data(), conv_b.size());
  cases.push_back({"to_bfloat16", "8192x256", nullptr, [&] { to_bfloat16(conv_a.data(), half_a.data(), conv_a.size()); }});
  cases.push_back({"to_float", "8192x256", nullptr, [&] { to_float(half_a.data(), back_a.data(), back_a.size()); }});
  cases.push_back({"to_bfloat16", "1024x2048", nullptr, [&] { to_bfloat16(conv_b.data(), half_b.data(), conv_b.size()); }});
  cases.push_back({"to_float", "1024x2048", nullptr, [&] { to_float(half_b.data(), back_b.data(), back_b.size()); }});

  // Microbatch slicing and joining: 8 microbatches of the GPT's (64, 128, 256) and the MLP's (1024, 2048).
  const tensor batch_gpt = random_tensor({B, T, D}, 26), batch_mlp = random_tensor({mb, hidden}, 27);
  for (auto [name, whole, n] : {std::tuple{"gpt", &batch_gpt, B}, std::tuple{"mlp", &batch_mlp, mb}}) {
    const tensor* w = whole;
    const std::size_t count = n;
    const std::string shape = std::string(name) + " " + shape_string(*w) + " / 8";
    cases.push_back({"slice_rows", shape, nullptr, [w, count] {
                       for (std::size_t m = 0; m < 8; ++m) slice_rows(*w, m * count / 8, (m + 1) * count / 8);
                     }});
    auto parts = std::make_shared<std::vector<tensor>>();
    for (std::size_t m = 0; m < 8; ++m) parts->push_back(slice_rows(*w, m * count / 8, (m + 1) * count / 8));
    cases.push_back({"concat_rows", shape, nullptr, [parts] {
                       std::vector<const tensor*> ptrs;
                       for (const tensor& p : *parts) ptrs.push_back(&p);
                       concat_rows(ptrs);
                     }});
  }

  // Note [bandwidth ceiling]: an op that reads and writes its tensors once (the optimizers, conversions,
  // slicing, ReLU) cannot scale past the memory system. STREAM's triad a = b + s c over three arrays of the
  // heavy MLP's parameter count (3 x 40 MB, far past the caches), on the same threads, measures that ceiling on
  // this machine: on the 2-vCPU AMD EPYC VM (AVX2) it took 5.7-5.9 ms on one thread and 4.2-5.1 on two (two
  // runs), an efficiency of 0.56-0.70, and AdamW and SGD over the same 10M parameters measured 0.56-0.66 beside
  // it: at the ceiling. It is printed as a row and kept out of the worst figures.
  std::vector<float> triad_a(mlp_count), triad_b(mlp_count, 1.0f), triad_c(mlp_count, 2.0f);
  cases.push_back({"memory.triad (ceiling)", "3 x " + std::to_string(mlp_count) + " floats", nullptr,
                   [&] {
                     float *a = triad_a.data(), *b = triad_b.data(), *c = triad_c.data();
                     const auto n = static_cast<std::ptrdiff_t>(triad_a.size());
#pragma omp parallel for simd schedule(static)
                     for (std::ptrdiff_t i = 0; i < n; ++i) a[i] = b[i] + 0.5f * c[i];
                   },
                   true});

  // Note [a team's start and end]: what an op's parallel region costs before any work, a team of the rank's threads
  // started and joined (awake, as between two ops of a step). Its ms are the microseconds of one region; times the
  // regions a step opens (223 teams a step were counted for the 4-layer GPT at batch 64 in one process, about
  // 82 more a microbatch in a pipeline: docs/performance.md) they say what share of a step the teams take. Printed
  // as a row and kept out of the worst figures.
  cases.push_back({"team.start_and_end (ceiling)", "1,000 empty regions", nullptr,
                   [] {
                     for (int i = 0; i < 1000; ++i) {
#pragma omp parallel
                       { asm volatile("" ::: "memory"); }  // a region the compiler keeps
                     }
                   },
                   true});

  // Time every case at every thread count.
  std::vector<std::vector<timing>> ms;  // [case][thread count]
  std::vector<const op_case*> chosen;
  for (const op_case& c : cases)
    if (only.empty() || (c.name + " " + c.shape).find(only) != std::string::npos) chosen.push_back(&c);
  const std::string load_before = bench::load_average();
  for (const op_case* c : chosen) {
    std::vector<timing> row;
    for (int n : threads) {
      set_compute_threads(n);
      row.push_back(time_ms(*c, repeats));
    }
    ms.push_back(row);
  }
  set_compute_threads(1);
  const std::string load_after = bench::load_average();

  std::printf("bench_ops: ms, median of %d repeats (best in the JSON); efficiency = t1 / (n * tn) from the medians "
              "and, under 'best', from the fastest repeats; load before %s, after %s\n",
              repeats, load_before.c_str(), load_after.c_str());
  std::printf("%-28s %-26s", "op", "shape");
  for (int n : threads) std::printf(" %9s", (std::to_string(n) + " thr").c_str());
  for (std::size_t i = 1; i < threads.size(); ++i) std::printf(" %7s", ("eff " + std::to_string(threads[i])).c_str());
  for (std::size_t i = 1; i < threads.size(); ++i) std::printf(" %7s", ("best " + std::to_string(threads[i])).c_str());
  std::printf("\n");
  nlohmann::json ops = nlohmann::json::array();
  double worst = 1e9, worst_best = 1e9;
  for (std::size_t k = 0; k < chosen.size(); ++k) {
    std::printf("%-28s %-26s", chosen[k]->name.c_str(), chosen[k]->shape.c_str());
    nlohmann::json times = nlohmann::json::object(), bests = nlohmann::json::object(), effs = nlohmann::json::object(),
                   best_effs = nlohmann::json::object();
    for (std::size_t i = 0; i < threads.size(); ++i) {
      std::printf(" %9.3f", ms[k][i].median);
      times[std::to_string(threads[i])] = ms[k][i].median;
      bests[std::to_string(threads[i])] = ms[k][i].best;
    }
    for (std::size_t i = 1; i < threads.size(); ++i) {
      const double e = ms[k][0].median / (threads[i] * ms[k][i].median);
      std::printf(" %7.2f", e);
      effs[std::to_string(threads[i])] = e;
      if (!chosen[k]->ceiling) worst = std::min(worst, e);
    }
    for (std::size_t i = 1; i < threads.size(); ++i) {
      const double e = ms[k][0].best / (threads[i] * ms[k][i].best);
      std::printf(" %7.2f", e);
      best_effs[std::to_string(threads[i])] = e;
      if (!chosen[k]->ceiling) worst_best = std::min(worst_best, e);
    }
    std::printf("\n");
    ops.push_back({{"op", chosen[k]->name}, {"shape", chosen[k]->shape}, {"ms", times}, {"best_ms", bests},
                   {"efficiency", effs}, {"best_efficiency", best_effs}, {"ceiling", chosen[k]->ceiling}});
  }
  nlohmann::json out = {{"bench", "bench_ops"}, {"repeats", repeats}, {"threads", threads}, {"load_before", load_before},
                        {"load_after", load_after}, {"worst_efficiency", threads.size() > 1 ? worst : 1.0},
                        {"worst_best_efficiency", threads.size() > 1 ? worst_best : 1.0}, {"ops", ops}};
  std::printf("%s\n", out.dump().c_str());
  return 0;
}

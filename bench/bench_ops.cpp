// bench_ops: what each piece of a training step costs on the cores it runs on: every op outside the big GEMMs at
// 1, 2, 4 ... threads (ops); the GEMMs on oneDNN fp32 and bf16 beside the xtensor-blas reference (gemm) and on a
// rank of N threads as one call or N bands (gemm-threads); float32 <-> bfloat16 conversions beside oneDNN's reorder
// (convert); a whole step against the bare GEMMs of its shapes (step, gpt); fp32 against bf16 training (bf16).
//
// Note [timing under load]: the machine may be shared. Each figure is a median of repeats, the load average is
// printed beside it, and compared things run in alternating blocks so both see the same load. Under load trust
// the thread-CPU and fastest-repeat figures, and compare figures of one run only.
//
// Usage: bench_ops [ops|gemm|gemm-threads|convert|step|gpt|bf16] [OPTIONS]   (--help lists each mode's options)
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <nlohmann/json.hpp>
#include <omp.h>

#include "actors/node.hpp"
#include "actors/pipeline.hpp"
#include "bench/bench_support.hpp"
#include "data/dataset.hpp"
#include "data/fashion_mnist.hpp"
#include "data/synthetic.hpp"
#include "data/text_corpus.hpp"
#include "model/attention.hpp"
#include "model/gelu.hpp"
#include "model/gpt_spec.hpp"
#include "model/grad_clip.hpp"
#include "model/layer_norm.hpp"
#include "model/loss.hpp"
#include "model/optimizer.hpp"
#include "model/position_embedding.hpp"
#include "model/relu.hpp"
#include "model/sequential.hpp"
#include "model/token_embedding.hpp"
#include "network/wire_format.hpp"
#include "random/seeded_random.hpp"
#include "tensor/bfloat16.hpp"
#include "tensor/compute.hpp"
#include "tensor/elementwise.hpp"
#include "tensor/matmul.hpp"
#include "training/trainer.hpp"

#ifdef AP_HAVE_ONEDNN
#include "tensor/onednn_context.hpp"
#endif

using namespace ap;
using bench::clock_type;
using bench::load_average;
using bench::median;
using bench::seconds_since;

namespace {

tensor random_tensor(const shape_t& shape, std::uint64_t seed, float scale = 1.0f) {
  tensor t = tensor::from_shape(shape);
  splitmix64 random(seed);
  for (float& v : t) v = symmetric_unit_float(random.next()) * scale;
  return t;
}

// ---- ops: every op outside the big GEMMs at 1, 2, 4 ... threads
// Each op timed alone on the intra-op threads, with the parallel efficiency t1 / (n * tn), at the 4-layer GPT's
// and the heavy MLP's shapes; forward and backward apart. Last, the memory's own scaling (Note [bandwidth
// ceiling]) and a team's start and end (Note [a team's start and end]).
namespace ops_alone {

tensor labels(std::size_t n, std::size_t classes, std::uint64_t seed) {
  tensor t = tensor::from_shape({n});
  splitmix64 random(seed);
  for (float& v : t) v = float(random.next() % classes);
  return t;
}

struct op_case {
  std::string name;   // "layer_norm.forward"
  std::string shape;  // "8192x256"
  std::function<void()> setup;  // untimed set-up before each repeat (may be empty)
  std::function<void()> run;
  bool ceiling = false;  // Note [bandwidth ceiling]
};

struct timing {
  double median, best;
};

timing time_ms(const op_case& c, int repeats) {
  std::vector<double> ms;
  for (int r = 0; r <= repeats; ++r) {  // run 0 warms up
    if (c.setup) c.setup();
    // The team is woken before the clock starts, as in training where ops follow each other on an awake team; a
    // wake-up would cost more than the small ops themselves.
#pragma omp parallel
    { }
    const auto start = clock_type::now();
    c.run();
    const double t = std::chrono::duration<double, std::milli>(clock_type::now() - start).count();
    if (r > 0) ms.push_back(t);
  }
  return {median(ms), *std::min_element(ms.begin(), ms.end())};
}

std::vector<int> default_threads() {
  const int all = single_process_threads();
  std::vector<int> out;
  for (int n = 1; n < all; n *= 2) out.push_back(n);
  out.push_back(all);
  return out;
}

int run(bench::arguments& args) {
  const int repeats = static_cast<int>(args.integer("--repeats", 9, 1));
  const std::string only = args.text("--only", "");
  const std::vector<int> threads = args.integers("--threads", default_threads());
  args.done();
  keep_tensor_memory();

  // The GPT's shapes: B 64, T 128, D 256, H 8, vocabulary 256, MLP 4 D.
  const std::size_t B = 64, T = 128, D = 256, H = 8, V = 256, rows = B * T;
  // The heavy MLP's: batch 1024, widths 784-2048-2048-2048-10.
  const std::size_t mb = 1024, hidden = 2048, classes = 10;
  const forward_context ctx;
  std::vector<op_case> cases;

  // Attention (the whole layer) and its heads alone.
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
  tensor ids = tensor::from_shape({B, T});
  splitmix64 id_random(14);
  for (float& v : ids) v = float(id_random.next() % V);
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

  // Residual add over (8192, 256) (model/block.cpp's loop).
  tensor res_h = random_tensor({rows, D}, 22);
  const tensor res_x = random_tensor({rows, D}, 23);
  cases.push_back({"residual_add", "8192x256", nullptr, [&] { add_into(res_h.data(), res_x.data(), res_h.size()); }});

  // Optimizers and gradient clipping over every parameter of the two models.
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

  // Note [bandwidth ceiling]: an op that reads and writes its tensors once (optimizers, conversions, slicing, ReLU)
  // cannot scale past the memory system. STREAM's triad over three arrays of the heavy MLP's parameter count, on the
  // same threads, measures that ceiling (figures: docs/performance.md). Printed as a row, kept out of the worst
  // figures.
  std::vector<float> triad_a(mlp_count), triad_b(mlp_count, 1.0f), triad_c(mlp_count, 2.0f);
  cases.push_back({"memory.triad (ceiling)", "3 x " + std::to_string(mlp_count) + " floats", nullptr,
                   [&] {
                     float *a = triad_a.data(), *b = triad_b.data(), *c = triad_c.data();
                     const auto n = static_cast<std::ptrdiff_t>(triad_a.size());
#pragma omp parallel for simd schedule(static)
                     for (std::ptrdiff_t i = 0; i < n; ++i) a[i] = b[i] + 0.5f * c[i];
                   },
                   true});

  // Note [a team's start and end]: the cost of a parallel region before any work, an awake team of the rank's
  // threads started and joined: its ms are the microseconds of one region. Times the regions a step opens
  // (docs/performance.md) it gives the teams' share of a step. Printed as a row, kept out of the worst figures.
  cases.push_back({"team.start_and_end (ceiling)", "1,000 empty regions", nullptr,
                   [] {
                     for (int i = 0; i < 1000; ++i) {
#pragma omp parallel
                       { asm volatile("" ::: "memory"); }
                     }
                   },
                   true});

  std::vector<std::vector<timing>> ms;
  std::vector<const op_case*> chosen;
  for (const op_case& c : cases)
    if (only.empty() || (c.name + " " + c.shape).find(only) != std::string::npos) chosen.push_back(&c);
  if (chosen.empty()) throw bench::usage_error("--only '" + only + "' matches no op");
  const std::string load_before = load_average();
  for (const op_case* c : chosen) {
    std::vector<timing> row;
    for (int n : threads) {
      set_compute_threads(n);
      row.push_back(time_ms(*c, repeats));
    }
    ms.push_back(row);
  }
  set_compute_threads(1);
  const std::string load_after = load_average();

  std::printf("bench_ops: ms, median of %d repeats (best in the JSON); efficiency = t1 / (n * tn) from the medians "
              "and, under 'best', from the fastest repeats; load before %s, after %s\n",
              repeats, load_before.c_str(), load_after.c_str());
  std::printf("%-28s %-26s", "op", "shape");
  for (int n : threads) std::printf(" %9s", (std::to_string(n) + " thr").c_str());
  for (std::size_t i = 1; i < threads.size(); ++i) std::printf(" %7s", ("eff " + std::to_string(threads[i])).c_str());
  for (std::size_t i = 1; i < threads.size(); ++i) std::printf(" %7s", ("best " + std::to_string(threads[i])).c_str());
  std::printf("\n");
  nlohmann::json out_ops = nlohmann::json::array();
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
    out_ops.push_back({{"op", chosen[k]->name}, {"shape", chosen[k]->shape}, {"ms", times}, {"best_ms", bests},
                       {"efficiency", effs}, {"best_efficiency", best_effs}, {"ceiling", chosen[k]->ceiling}});
  }
  nlohmann::json out = {{"bench", "bench_ops ops"}, {"repeats", repeats}, {"threads", threads},
                        {"load_before", load_before}, {"load_after", load_after},
                        {"worst_efficiency", threads.size() > 1 ? worst : 1.0},
                        {"worst_best_efficiency", threads.size() > 1 ? worst_best : 1.0}, {"ops", out_ops}};
  std::printf("%s\n", out.dump().c_str());
  return 0;
}

}  // namespace ops_alone

// ---- gemm: the GEMMs of training on oneDNN (fp32 and bf16) next to the xtensor-blas reference (OpenBLAS)
// The three products of each Linear (in -> out) of the small and heavy MLPs, M rows a batch (256) or a
// microbatch (32), one thread:
//   fwd  y (M, out)   = x (M, in) W (in, out)
//   dx   dx (M, in)   = dy (M, out) W^T            (W stored (in, out))
//   dW   dW (in, out) += x^T dy                    (x stored (M, in): A transposed; accumulate, beta = 1)
// Each repeat runs oneDNN fp32, oneDNN bf16 and the reference back to back; GFLOPS of the median repeat.
namespace gemm_backends {

void fill(std::vector<float>& v, unsigned seed) {
  unsigned x = seed * 2654435761u + 1u;
  for (float& f : v) {
    x = x * 1664525u + 1013904223u;
    f = static_cast<float>(x >> 8) / 16777216.0f - 0.5f;
  }
}

int run(bench::arguments& args) {
  int repeats = static_cast<int>(args.integer("--repeats", 7, 1));
  if (args.flag("--quick")) repeats = 3;
  args.done();
  set_compute_threads(1);
  if (!onednn_available()) throw std::runtime_error("this build has no oneDNN (-DAP_COMPUTE=reference): nothing to compare");
  const std::string load_before = load_average();
  std::printf("bench_ops gemm: oneDNN fp32 / bf16 vs the xtensor-blas reference (OpenBLAS), 1 thread, median of %d "
              "repeats\nload average before: %s\n\n",
              repeats, load_before.c_str());
  // Without AVX-512 oneDNN's fp32 products are OpenBLAS's in bands of rows (Note [fp32 products on OpenBLAS
  // without AVX-512]): its column measures those.
  const char* fp32_path = onednn_avx512() ? "onednn" : "openblas";
  if (!onednn_avx512())
    std::printf("no AVX-512 here: the 'dnnl f32' column is the fast path's fp32 product, OpenBLAS in bands of "
                "rows, and bf16 widens to it\n\n");
  std::printf("%-6s %4s %-4s %5s %5s %5s | %9s %9s %9s | %8s %8s\n", "model", "M", "op", "m", "n", "k",
              "dnnl f32", "dnnl bf16", "ref f32", "f32/ref", "bf16/f32");

  struct model { const char* name; std::vector<std::size_t> widths; };
  const std::vector<model> models = {{"small", {784, 512, 256, 10}}, {"heavy", {784, 2048, 2048, 2048, 10}}};
  nlohmann::json rows = nlohmann::json::array(), totals = nlohmann::json::array();
  for (const model& md : models) {
    for (std::size_t rows_m : {std::size_t{256}, std::size_t{32}}) {
      double flops_total = 0.0, t_f32 = 0.0, t_bf16 = 0.0, t_ref = 0.0;
      for (std::size_t l = 0; l + 1 < md.widths.size(); ++l) {
        const std::size_t in = md.widths[l], out = md.widths[l + 1];
        struct product { const char* op; bool ta, tb; std::size_t m, n, k; float beta; };
        const product products[] = {{"fwd", false, false, rows_m, out, in, 0.0f},
                                    {"dx", false, true, rows_m, in, out, 0.0f},
                                    {"dW", true, false, in, out, rows_m, 1.0f}};
        for (const product& p : products) {
          std::vector<float> a(p.m * p.k), b(p.k * p.n), c(p.m * p.n, 0.0f);
          fill(a, static_cast<unsigned>(p.m + p.k));
          fill(b, 7);
          std::vector<bfloat16> a16(a.size()), b16(b.size());
          to_bfloat16(a.data(), a16.data(), a.size());
          to_bfloat16(b.data(), b16.data(), b.size());
          const double flops = 2.0 * double(p.m) * double(p.n) * double(p.k);
          auto run_f32 = [&] { gemm_onednn(p.ta, p.tb, p.m, p.n, p.k, 1.0f, a.data(), b.data(), p.beta, c.data()); };
          auto run_bf16 = [&] { gemm_onednn(p.ta, p.tb, p.m, p.n, p.k, 1.0f, a16.data(), b16.data(), p.beta, c.data()); };
          auto run_ref = [&] { gemm_reference(p.ta, p.tb, p.m, p.n, p.k, 1.0f, a.data(), b.data(), p.beta, c.data()); };
          run_f32();
          run_bf16();
          run_ref();
          // ~10 ms of calls per repeat, above timer noise.
          const auto t0 = clock_type::now();
          run_f32();
          const int calls = std::max(1, static_cast<int>(0.01 / std::max(seconds_since(t0), 1e-6)));
          std::vector<double> tf, tb, tr;
          auto time = [&](auto&& f, std::vector<double>& wall) {
            const auto start = clock_type::now();
            for (int i = 0; i < calls; ++i) f();
            wall.push_back(seconds_since(start) / calls);
          };
          for (int r = 0; r < repeats; ++r) {
            time(run_f32, tf);
            time(run_bf16, tb);
            time(run_ref, tr);
          }
          const double mf = median(tf), mb = median(tb), mr = median(tr);
          flops_total += flops, t_f32 += mf, t_bf16 += mb, t_ref += mr;
          std::printf("%-6s %4zu %-4s %5zu %5zu %5zu | %9.1f %9.1f %9.1f | %7.2fx %7.2fx\n", md.name, rows_m, p.op,
                      p.m, p.n, p.k, flops / mf * 1e-9, flops / mb * 1e-9, flops / mr * 1e-9, mr / mf, mf / mb);
          std::fflush(stdout);
          rows.push_back({{"model", md.name}, {"rows", rows_m}, {"op", p.op}, {"m", p.m}, {"n", p.n}, {"k", p.k},
                          {"onednn_f32_gflops", flops / mf * 1e-9}, {"onednn_bf16_gflops", flops / mb * 1e-9},
                          {"reference_f32_gflops", flops / mr * 1e-9}, {"calls_per_repeat", calls}});
        }
      }
      std::printf("%-6s %4zu %-4s %17s | %9.1f %9.1f %9.1f | %7.2fx %7.2fx   <- all products of a step\n\n",
                  md.name, rows_m, "all", "", flops_total / t_f32 * 1e-9, flops_total / t_bf16 * 1e-9,
                  flops_total / t_ref * 1e-9, t_ref / t_f32, t_f32 / t_bf16);
      totals.push_back({{"model", md.name}, {"rows", rows_m}, {"onednn_f32_gflops", flops_total / t_f32 * 1e-9},
                        {"onednn_bf16_gflops", flops_total / t_bf16 * 1e-9},
                        {"reference_f32_gflops", flops_total / t_ref * 1e-9}});
    }
  }
  const std::string load_after = load_average();
  std::printf("load average after: %s\n", load_after.c_str());
  nlohmann::json out = {{"bench", "bench_ops gemm"}, {"repeats", repeats}, {"threads", 1}, {"fp32_fast_path", fp32_path},
                        {"load_average_before", load_before}, {"load_average_after", load_after},
                        {"totals", totals}, {"results", rows}};
  std::printf("%s\n", out.dump().c_str());
  return 0;
}

}  // namespace gemm_backends

// ---- gemm-threads: the training products on a rank of N threads, one N-thread call against N bands of rows
// Each band a 1-thread call (the choice of Note [rows split among the team]), beside one thread, on the GPT's and
// heavy MLP's Linear products at a batch and a microbatch. Thread counts above the cores measure time-slicing.
namespace gemm_bands {

struct product {
  const char* model;
  std::size_t rows, in, out;
  int kind;
};

const char* kind_name(int kind) { return kind == 0 ? "fwd" : kind == 1 ? "dx" : "dW"; }

// One product on rows [first, last) of its batch.
void call(const product& p, std::size_t first, std::size_t last, const float* x, const float* w, const float* dy,
          float* y, float* dx) {
  const std::size_t r = last - first;
  if (p.kind == 0) gemm(false, false, r, p.out, p.in, 1.0f, x + first * p.in, w, 0.0f, y + first * p.out);
  if (p.kind == 1) gemm(false, true, r, p.in, p.out, 1.0f, dy + first * p.out, w, 0.0f, dx + first * p.in);
}

// dW's rows are W's in-features, so a band is a block of x's columns. gemm takes no leading dimension, so bands
// read rows of xt = x^T, a transposed copy made once and not timed.
void call_dw(const product& p, std::size_t first, std::size_t last, const float* xt, const float* dy, float* dw) {
  gemm(false, false, last - first, p.out, p.rows, 1.0f, xt + first * p.rows, dy, 1.0f, dw + first * p.out);
}

int run(bench::arguments& args) {
  const std::vector<int> thread_counts = args.integers("--threads", {4, 16});
  const int repeats = static_cast<int>(args.integer("--repeats", 7, 1));
  args.done();
  std::vector<product> products;
  for (const std::size_t rows : {std::size_t{8192}, std::size_t{1024}})
    for (const auto& [in, out] : std::vector<std::pair<std::size_t, std::size_t>>{{256, 768}, {256, 256}, {256, 1024}, {1024, 256}})
      for (int kind = 0; kind < 3; ++kind) products.push_back({"gpt", rows, in, out, kind});
  for (const std::size_t rows : {std::size_t{1024}, std::size_t{128}})
    for (const auto& [in, out] : std::vector<std::pair<std::size_t, std::size_t>>{{784, 2048}, {2048, 2048}})
      for (int kind = 0; kind < 3; ++kind) products.push_back({"mlp", rows, in, out, kind});
  std::printf("bench_ops gemm-threads: GFLOPS, median of %d calls; load %s\n", repeats, load_average().c_str());
  std::printf("%-4s %5s %-3s %5s %5s %5s %8s", "", "rows", "op", "m", "n", "k", "1 thr");
  for (int n : thread_counts) std::printf("  %5d call %5d bands", n, n);
  std::printf("\n");
  nlohmann::json out = nlohmann::json::array();
  for (const product& p : products) {
    const std::size_t widest = std::max(p.in, p.out);
    std::vector<float> x(p.rows * widest, 0.25f), w(widest * widest, 0.125f), dy(p.rows * widest, 0.5f),
        y(p.rows * widest), dx(p.rows * widest), dw(widest * widest, 0.0f), xt(p.rows * widest, 0.25f);
    const double flops = 2.0 * double(p.rows) * double(p.in) * double(p.out);
    const auto whole = [&] {
      if (p.kind < 2) call(p, 0, p.rows, x.data(), w.data(), dy.data(), y.data(), dx.data());
      else gemm(true, false, p.in, p.out, p.rows, 1.0f, x.data(), dy.data(), 1.0f, dw.data());
    };
    const auto bands = [&](int n) {
      const std::size_t m = p.kind == 2 ? p.in : p.rows;
#pragma omp parallel num_threads(n)
      {
        omp_set_num_threads(1);
        const auto b = static_cast<std::size_t>(omp_get_thread_num()), team = static_cast<std::size_t>(omp_get_num_threads());
        const std::size_t first = m * b / team, last = m * (b + 1) / team;
        if (p.kind < 2) call(p, first, last, x.data(), w.data(), dy.data(), y.data(), dx.data());
        else call_dw(p, first, last, xt.data(), dy.data(), dw.data());
      }
    };
    const std::size_t m = p.kind == 2 ? p.in : p.rows, n = p.kind == 1 ? p.in : p.out,
                      k = p.kind == 0 ? p.in : p.kind == 1 ? p.out : p.rows;
    set_compute_threads(1);
    const double one = flops / bench::median_seconds(repeats, whole) * 1e-9;
    std::printf("%-4s %5zu %-3s %5zu %5zu %5zu %8.1f", p.model, p.rows, kind_name(p.kind), m, n, k, one);
    nlohmann::json row{{"model", p.model}, {"rows", p.rows}, {"op", kind_name(p.kind)}, {"m", m}, {"n", n}, {"k", k},
                       {"one_thread", one}};
    for (int t : thread_counts) {
      set_compute_threads(t);
      const double c = flops / bench::median_seconds(repeats, whole) * 1e-9;
      set_compute_threads(1);
      const double b = flops / bench::median_seconds(repeats, [&] { bands(t); }) * 1e-9;
      std::printf("  %10.1f %11.1f", c, b);
      row["call_" + std::to_string(t)] = c;
      row["bands_" + std::to_string(t)] = b;
    }
    std::printf("\n");
    std::fflush(stdout);
    out.push_back(row);
  }
  std::printf("%s\n", nlohmann::json{{"bench", "bench_ops gemm-threads"}, {"rows", out}}.dump().c_str());
  return 0;
}

}  // namespace gemm_bands

// ---- convert: float32 <-> bfloat16 buffer conversion, the project's loops next to oneDNN's reorder
// The loops of tensor/bfloat16.cpp on --elements elements, one thread (the reorder also on two); GB/s counts
// bytes read plus written. Each result is first compared bit for bit with the scalar conversions on data with
// NaNs, infinities, ties, subnormals and overflow (Note [conversions] says why the loops are kept).
namespace conversions {

float bits_to_float(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// Random floats over many magnitudes, every special case included.
std::vector<float> test_data(std::size_t n) {
  std::vector<float> x(n);
  splitmix64 random(42);
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint64_t r = random.next();
    switch (r % 16) {
      case 0: x[i] = bits_to_float(0x7f800000u | std::uint32_t(r >> 40) | 1u); break;
      case 1: x[i] = bits_to_float(0xff800001u); break;
      case 2: x[i] = (r >> 8) & 1 ? INFINITY : -INFINITY; break;
      case 3: x[i] = bits_to_float((std::uint32_t(r >> 16) & 0xffff0000u) | 0x8000u); break;
      case 4: x[i] = bits_to_float(std::uint32_t(r >> 32) & 0x807fffffu); break;
      case 5: x[i] = bits_to_float(0x7f7fffffu); break;
      default: x[i] = bits_to_float(std::uint32_t(r >> 32)); break;
    }
  }
  return x;
}

double report(const char* what, std::size_t bytes, double s) {
  std::printf("  %-16s %10.1f us  %6.1f GB/s\n", what, s * 1e6, double(bytes) / s / 1e9);
  return double(bytes) / s / 1e9;
}

int run(bench::arguments& args) {
  const int repeats = static_cast<int>(args.integer("--repeats", 15, 1));
  const auto n = static_cast<std::size_t>(args.integer("--elements", std::size_t(1) << 24, 1));
  args.done();
  std::printf("bench_ops convert: %zu elements, median of %d repeats, load %s\n", n, repeats, load_average().c_str());
  const std::vector<float> x = test_data(n);
  std::vector<bfloat16> b(n), b_ref(n);
  std::vector<float> back(n), back_ref(n);
  const std::size_t bytes = n * (sizeof(float) + sizeof(bfloat16));

  for (std::size_t i = 0; i < n; ++i) b_ref[i] = to_bfloat16(x[i]);
  for (std::size_t i = 0; i < n; ++i) back_ref[i] = to_float(b_ref[i]);
  to_bfloat16(x.data(), b.data(), n);
  to_float(b_ref.data(), back.data(), n);
  const bool loops_equal = std::memcmp(b.data(), b_ref.data(), n * 2) == 0 &&
                           std::memcmp(back.data(), back_ref.data(), n * 4) == 0;
  std::printf("project loops (tensor/bfloat16.cpp), 1 thread: bitwise equal to the scalar: %s\n",
              loops_equal ? "yes" : "NO");
  nlohmann::json out = {{"bench", "bench_ops convert"}, {"elements", n}, {"loops_bitwise_equal", loops_equal}};
  out["loops_gb_s"] = {report("f32 -> bf16", bytes, bench::median_seconds(repeats, [&] { to_bfloat16(x.data(), b.data(), n); })),
                       report("bf16 -> f32", bytes, bench::median_seconds(repeats, [&] { to_float(b_ref.data(), back.data(), n); }))};

#ifdef AP_HAVE_ONEDNN
  using dnnl::memory;
  const memory::dims dims{static_cast<memory::dim>(n)};
  const memory::desc f32_desc(dims, memory::data_type::f32, memory::format_tag::a);
  const memory::desc bf16_desc(dims, memory::data_type::bf16, memory::format_tag::a);
  auto& eng = onednn::engine();
  memory mx(f32_desc, eng, const_cast<float*>(x.data())), mb(bf16_desc, eng, b.data());
  memory mb_ref(bf16_desc, eng, b_ref.data()), mback(f32_desc, eng, back.data());
  for (int threads : {1, 2}) {
    omp_set_num_threads(threads);
    const dnnl::reorder::primitive_desc down_pd(mx, mb), up_pd(mb_ref, mback);
    const dnnl::reorder down(down_pd), up(up_pd);
    auto& st = onednn::stream();
    auto run_down = [&] { down.execute(st, mx, mb); st.wait(); };
    auto run_up = [&] { up.execute(st, mb_ref, mback); st.wait(); };
    run_down();
    run_up();
    std::size_t down_diff = 0, up_diff = 0, subnormal_diff = 0;
    for (std::size_t i = 0; i < n; ++i) {
      if (b[i].bits != b_ref[i].bits) {
        ++down_diff;
        std::uint32_t u;
        std::memcpy(&u, &x[i], 4);
        if ((u & 0x7f800000u) == 0) ++subnormal_diff;
      }
      if (std::memcmp(&back[i], &back_ref[i], 4) != 0) ++up_diff;
    }
    std::printf("oneDNN reorder (%s), %d thread%s: elements differing from the scalar: f32->bf16 %zu (%zu of them "
                "subnormal inputs), bf16->f32 %zu\n",
                down_pd.impl_info_str(), threads, threads > 1 ? "s" : "", down_diff, subnormal_diff, up_diff);
    out["reorder_gb_s"][std::to_string(threads)] = {report("f32 -> bf16", bytes, bench::median_seconds(repeats, run_down)),
                                                     report("bf16 -> f32", bytes, bench::median_seconds(repeats, run_up))};
  }
#else
  std::printf("oneDNN: not built (AP_COMPUTE=reference)\n");
#endif
  out["load_after"] = load_average();
  std::printf("load after: %s\n%s\n", load_average().c_str(), out.dump().c_str());
  return 0;
}

}  // namespace conversions

// ---- step: a training step of the two MLPs against the bare GEMMs of its shapes
// On --threads compute threads, (1) training steps over Fashion-MNIST and (2) bare gemm calls on exactly the
// GEMM shapes and betas of one step. ratio = training GFLOPS / bare GFLOPS is the share of a step spent inside
// GEMM; the two alternate in blocks (Note [timing under load]), and the ratio is also given from thread CPU time
// and fastest repeats; minor page faults show the fresh memory a step touches. scripts/bench_old_vs_new.sh reads
// its JSON line.
//   --quick        40 steps of the small model instead of a full epoch, 8 of the heavy one instead of 40
//   --heavy-steps  timed steps of the heavy model; --model small|heavy: that model only
//   --breakdown    also time each phase of a step beside the same GEMM alone
namespace mlp_step {

// One timed call's wall and thread-CPU seconds and minor page faults.
struct sample {
  double wall = 0.0, cpu = 0.0;
  long faults = 0;
};

long minor_faults() {
  rusage ru{};
  getrusage(RUSAGE_THREAD, &ru);
  return ru.ru_minflt;
}

sample time_call(const std::function<void()>& f) {
  const long f0 = minor_faults();
  const double c0 = bench::thread_cpu_seconds();
  const auto w0 = clock_type::now();
  f();
  const double wall = seconds_since(w0);
  return {wall, bench::thread_cpu_seconds() - c0, minor_faults() - f0};
}

// Medians over repeats, and min_wall.
struct medians {
  double wall = 0.0, cpu = 0.0, min_wall = 0.0, faults = 0.0;
};
medians median_of(const std::vector<sample>& s) {
  std::vector<double> w, c, f;
  for (const sample& x : s) w.push_back(x.wall), c.push_back(x.cpu), f.push_back(double(x.faults));
  return {median(w), median(c), w.empty() ? 0.0 : *std::min_element(w.begin(), w.end()), median(f)};
}

struct linear_shape {
  std::size_t in, out;
};

std::vector<linear_shape> linear_shapes(const sequential& model) {
  std::vector<linear_shape> shapes;
  for (std::size_t i = 0; i < model.size(); ++i) {
    const auto in = model.at(i).in_features(), out = model.at(i).out_features();
    if (in && out) shapes.push_back({*in, *out});
  }
  return shapes;
}

// Flops: forward, dW and dx 2 n in out each; no dx for the first layer.
double gemm_flops_per_step(const std::vector<linear_shape>& shapes, std::size_t n) {
  double flops = 0.0;
  for (std::size_t l = 0; l < shapes.size(); ++l)
    flops += (l == 0 ? 2.0 : 3.0) * 2.0 * double(n) * double(shapes[l].in) * double(shapes[l].out);
  return flops;
}

// Operands shaped like the layer's own, values in [-0.5, 0.5) so nothing drifts into denormals.
struct bare_layer {
  linear_shape s;
  std::vector<float> x, w, y, dy, dw, dx;
};

std::vector<float> filled(std::size_t count, std::uint64_t seed) {
  std::vector<float> v(count);
  std::uint64_t state = seed * 0x9E3779B97F4A7C15ull + 1;
  for (float& f : v) {
    state ^= state << 13, state ^= state >> 7, state ^= state << 17;
    f = float(state >> 40) / float(1ull << 24) - 0.5f;
  }
  return v;
}

bare_layer bare_of(linear_shape s, std::size_t n, std::uint64_t& seed) {
  return {s, filled(n * s.in, seed++), filled(s.in * s.out, seed++), filled(n * s.out, seed++),
          filled(n * s.out, seed++), filled(s.in * s.out, seed++), filled(n * s.in, seed++)};
}

void forward_gemm(bare_layer& l, std::size_t n) {
  gemm(false, false, n, l.s.out, l.s.in, 1.0f, l.x.data(), l.w.data(), 1.0f, l.y.data());
}
void dx_gemm(bare_layer& l, std::size_t n) {
  gemm(false, true, n, l.s.in, l.s.out, 1.0f, l.dy.data(), l.w.data(), 0.0f, l.dx.data());
}
void dw_gemm(bare_layer& l, std::size_t n) {
  gemm(true, false, l.s.in, l.s.out, n, 1.0f, l.x.data(), l.dy.data(), 1.0f, l.dw.data());
}

// The same calls, order and betas as linear::forward / backward_* in train_step.
void bare_step(std::vector<bare_layer>& layers, std::size_t n) {
  for (bare_layer& l : layers) forward_gemm(l, n);
  for (std::size_t i = layers.size(); i-- > 0;) {
    if (i > 0) dx_gemm(layers[i], n);
    dw_gemm(layers[i], n);
  }
}

struct model_case {
  std::string label, spec;
  std::size_t batch_size;
  std::size_t steps;
  std::size_t block;  // Note [timing under load]
  std::size_t warmup;
};

struct model_result {
  std::string label, spec;
  std::size_t batch_size = 0, steps = 0, samples = 0, parameters = 0;
  bool full_epoch = false;
  double run_wall_s = 0.0;
  double samples_per_s = 0.0;
  double samples_per_s_median = 0.0;
  double gemm_gflop_per_step = 0.0;
  medians step, bare;
  double mean_loss = 0.0;
  std::size_t bare_repeats = 0;
};

double gflops(double flop, double seconds) { return seconds > 0 ? flop / seconds * 1e-9 : 0.0; }

model_result run_case(const model_case& mc, const dataset& data) {
  sequential model = sequential::from_spec(mc.spec);
  optimizer_config adam;
  local_runner runner(model, adam);
  const auto shapes = linear_shapes(model);
  std::vector<bare_layer> bare;
  std::uint64_t seed = 1;
  for (const linear_shape& s : shapes) bare.push_back(bare_of(s, mc.batch_size, seed));

  model_result r;
  r.label = mc.label, r.spec = mc.spec, r.batch_size = mc.batch_size;
  r.parameters = model.parameter_count();
  r.gemm_gflop_per_step = gemm_flops_per_step(shapes, mc.batch_size) * 1e-9;

  const std::size_t batches = batch_count(data.size(), mc.batch_size);
  r.full_epoch = mc.steps == 0 || mc.steps >= batches;
  const std::size_t steps = r.full_epoch ? batches : mc.steps;

  // Warm-up on another epoch's batches.
  const auto warm_order = epoch_order(data.size(), 1, 999);
  for (std::size_t s = 0; s < mc.warmup; ++s) {
    const batch b = make_batch(data, warm_order, s % batches, mc.batch_size);
    runner.train_step(b.inputs, b.labels, s);
    bare_step(bare, mc.batch_size);
  }

  const auto order = epoch_order(data.size(), 1, 0);
  std::vector<sample> step_times, bare_times;
  double loss_sum = 0.0;
  for (std::size_t s = 0; s < steps;) {
    for (std::size_t k = 0; k < mc.block; ++k) bare_times.push_back(time_call([&] { bare_step(bare, mc.batch_size); }));
    for (std::size_t k = 0; k < mc.block && s < steps; ++k, ++s) {
      batch b;
      float loss = 0.0f;
      const sample t = time_call([&] {
        b = make_batch(data, order, s, mc.batch_size);
        loss = runner.train_step(b.inputs, b.labels, mc.warmup + s);
      });
      r.run_wall_s += t.wall;
      r.samples += rows(b.inputs);
      loss_sum += loss;
      if (rows(b.inputs) == mc.batch_size) step_times.push_back(t);
    }
  }
  r.steps = steps;
  r.mean_loss = loss_sum / double(steps);
  r.step = median_of(step_times);
  r.bare = median_of(bare_times);
  r.bare_repeats = bare_times.size();
  r.samples_per_s = r.run_wall_s > 0 ? double(r.samples) / r.run_wall_s : 0.0;
  r.samples_per_s_median = r.step.wall > 0 ? double(mc.batch_size) / r.step.wall : 0.0;
  return r;
}

// --breakdown: one train_step taken apart, each phase timed.
void print_breakdown(const std::string& spec, std::size_t batch_size, std::size_t repeats, const dataset& data) {
  sequential model = sequential::from_spec(spec);
  auto opt = make_optimizer(optimizer_config{});
  auto loss = make_loss("cross_entropy");
  const auto order = epoch_order(data.size(), 1, 0);
  std::map<std::string, std::vector<double>> phases, bare_phases;
  std::vector<std::string> names;
  auto timed = [&](const std::string& name, const std::function<void()>& f) {
    if (!phases.count(name)) names.push_back(name);
    phases[name].push_back(time_call(f).wall);
  };
  // Each Linear phase's bare GEMM, run right after the step.
  std::map<std::size_t, bare_layer> bare;
  std::uint64_t seed = 1;
  for (std::size_t i = 0; i < model.size(); ++i) {
    const auto in = model.at(i).in_features(), out = model.at(i).out_features();
    if (in && out) bare[i] = bare_of({*in, *out}, batch_size, seed);
  }
  for (std::size_t rep = 0; rep < repeats + 1; ++rep) {
    const batch b = make_batch(data, order, rep, batch_size);
    timed("zero_grad", [&] { model.zero_grad(); });
    sequential_cache cache;
    cache.layers.resize(model.size());
    tensor h = b.inputs;
    const forward_context ctx{true, rep, 0};
    for (std::size_t i = 0; i < model.size(); ++i)
      timed("F " + std::to_string(i) + " " + model.at(i).describe(), [&] { h = model.at(i).forward(h, cache.layers[i], ctx); });
    tensor d;
    timed("loss + gradient", [&] {
      loss->compute_loss(h, b.labels);
      d = loss->compute_gradient(h, b.labels);
    });
    for (std::size_t i = model.size(); i-- > 0;) {
      const std::string name = std::to_string(i) + " " + model.at(i).describe();
      tensor dx;
      if (i > 0) timed("Bi " + name, [&] { model.at(i).backward_input(d, cache.layers[i], &dx); });
      timed("Bw " + name, [&] { model.at(i).backward_weight(d, cache.layers[i]); });
      d = std::move(dx);
    }
    timed("cache free", [&] { cache = sequential_cache{}; });
    timed("optimizer (adam)", [&] { opt->step(model.parameters()); });
    for (auto& [i, l] : bare) {
      const std::string name = std::to_string(i) + " " + model.at(i).describe();
      bare_phases["F " + name].push_back(time_call([&, &l = l] { forward_gemm(l, batch_size); }).wall);
      if (i > 0) bare_phases["Bi " + name].push_back(time_call([&, &l = l] { dx_gemm(l, batch_size); }).wall);
      bare_phases["Bw " + name].push_back(time_call([&, &l = l] { dw_gemm(l, batch_size); }).wall);
    }
  }
  double total = 0.0, total_bare = 0.0;
  for (auto* m : {&phases, &bare_phases})
    for (auto& [name, v] : *m) v.erase(v.begin());
  for (const auto& n : names) total += median(phases[n]);
  std::printf("\nbreakdown of one %s step (batch %zu), median of %zu, wall ms; bare = the same GEMM alone:\n",
              spec.c_str(), batch_size, repeats);
  std::printf("  %-34s %9s %6s %9s %9s\n", "phase", "ms", "share", "bare ms", "outside");
  for (const auto& n : names) {
    const double m = median(phases[n]);
    if (bare_phases.count(n)) {
      const double g = median(bare_phases[n]);
      total_bare += g;
      std::printf("  %-34s %9.3f %5.1f%% %9.3f %9.3f\n", n.c_str(), m * 1e3, 100.0 * m / total, g * 1e3, (m - g) * 1e3);
    } else {
      std::printf("  %-34s %9.3f %5.1f%% %9s %9.3f\n", n.c_str(), m * 1e3, 100.0 * m / total, "", m * 1e3);
    }
  }
  std::printf("  %-34s %9.3f %6s %9.3f %9.3f\n", "sum of medians", total * 1e3, "", total_bare * 1e3,
              (total - total_bare) * 1e3);
}

void print_table(const std::vector<model_result>& results) {
  std::printf("\n%-8s %-22s %6s %6s %10s %10s %9s %9s %9s %7s %7s\n", "model", "spec", "batch", "steps",
              "samples/s", "(median)", "step ms", "bare ms", "GF/step", "train", "bare");
  std::printf("%-8s %-22s %6s %6s %10s %10s %9s %9s %9s %7s %7s\n", "", "", "", "", "(run)", "", "", "", "",
              "GFLOPS", "GFLOPS");
  for (const auto& r : results)
    std::printf("%-8s %-22s %6zu %6zu %10.0f %10.0f %9.2f %9.2f %9.3f %7.1f %7.1f\n", r.label.c_str(),
                r.spec.c_str(), r.batch_size, r.steps, r.samples_per_s, r.samples_per_s_median, r.step.wall * 1e3,
                r.bare.wall * 1e3, r.gemm_gflop_per_step, gflops(r.gemm_gflop_per_step * 1e9, r.step.wall),
                gflops(r.gemm_gflop_per_step * 1e9, r.bare.wall));
  std::printf("\nratio = training GFLOPS / bare GEMM GFLOPS = bare time / step time, from medians of wall time,\n"
              "of thread CPU time, and from the fastest repeat of each (the last two resist a loaded machine)\n");
  std::printf("%-8s %8s %8s %8s %10s %10s %12s\n", "model", "wall", "cpu", "min", "step cpu", "bare cpu",
              "faults/step");
  for (const auto& r : results)
    std::printf("%-8s %8.3f %8.3f %8.3f %8.2fms %8.2fms %12.0f   mean loss %.4f%s\n", r.label.c_str(),
                r.bare.wall / r.step.wall, r.bare.cpu / r.step.cpu, r.bare.min_wall / r.step.min_wall,
                r.step.cpu * 1e3, r.bare.cpu * 1e3, r.step.faults, r.mean_loss, r.full_epoch ? " (one full epoch)" : "");
}

nlohmann::json to_json(const model_result& r) {
  return {{"model", r.label},
          {"spec", r.spec},
          {"batch_size", r.batch_size},
          {"steps", r.steps},
          {"full_epoch", r.full_epoch},
          {"parameters", r.parameters},
          {"samples", r.samples},
          {"wall_s", r.run_wall_s},
          {"samples_per_s", r.samples_per_s},
          {"samples_per_s_median_step", r.samples_per_s_median},
          {"step_ms", r.step.wall * 1e3},
          {"step_cpu_ms", r.step.cpu * 1e3},
          {"bare_gemm_ms", r.bare.wall * 1e3},
          {"bare_gemm_cpu_ms", r.bare.cpu * 1e3},
          {"bare_repeats", r.bare_repeats},
          {"gemm_gflop_per_step", r.gemm_gflop_per_step},
          {"train_gflops", gflops(r.gemm_gflop_per_step * 1e9, r.step.wall)},
          {"bare_gflops", gflops(r.gemm_gflop_per_step * 1e9, r.bare.wall)},
          {"ratio", r.bare.wall / r.step.wall},
          {"ratio_cpu", r.bare.cpu / r.step.cpu},
          {"ratio_min", r.bare.min_wall / r.step.min_wall},
          {"step_min_ms", r.step.min_wall * 1e3},
          {"bare_gemm_min_ms", r.bare.min_wall * 1e3},
          {"page_faults_per_step", r.step.faults},
          {"mean_loss", r.mean_loss}};
}

int run(bench::arguments& args) {
  const bool quick = args.flag("--quick"), breakdown = args.flag("--breakdown");
  const auto heavy_steps = static_cast<std::size_t>(args.integer("--heavy-steps", quick ? 8 : 40, 1));
  const std::string dir = args.text("--data", default_fashion_mnist_dir), only = args.text("--model", "");
  const int threads = static_cast<int>(args.integer("--threads", 1, 1));
  args.done();
  if (!only.empty() && only != "small" && only != "heavy") throw bench::usage_error("--model takes small or heavy, not " + only);
  keep_tensor_memory();
  set_compute_threads(threads);
  const std::string load_before = load_average();
  const dataset train_set = load_fashion_mnist("train", dir);
  std::printf("bench_ops step: single-process training, compute backend %s, %d thread(s), Adam; load average before: %s\n",
              compute_backend_name(current_compute_backend()).c_str(), threads, load_before.c_str());

  const std::vector<model_case> cases = {
      {"small", "784-512-256-10", 256, quick ? std::size_t(40) : 0, 10, 5},
      {"heavy", "784-2048-2048-2048-10", 256, heavy_steps, 1, 2},
  };
  std::vector<model_result> results;
  for (const model_case& mc : cases) {
    if (!only.empty() && mc.label != only) continue;
    std::printf("running %s %s ...\n", mc.label.c_str(), mc.spec.c_str());
    std::fflush(stdout);
    results.push_back(run_case(mc, train_set));
  }
  const std::string load_after = load_average();
  print_table(results);
  std::printf("load average after: %s\n", load_after.c_str());
  if (breakdown)
    for (const model_case& mc : cases)
      if (only.empty() || mc.label == only) print_breakdown(mc.spec, mc.batch_size, quick ? 3 : 9, train_set);

  nlohmann::json j = {{"bench", "bench_ops step"}, {"compute_backend", compute_backend_name(current_compute_backend())},
                      {"compute_threads", threads}, {"quick", quick}, {"load_before", load_before},
                      {"load_after", load_after}};
  for (const auto& r : results) j["models"].push_back(to_json(r));
  std::printf("%s\n", j.dump().c_str());
  return 0;
}

}  // namespace mlp_step

// ---- gpt: a GPT's training step against the bare GEMMs of its Linear layers
// The 4-layer GPT on the fortunes, fp32: one process on 1 thread and on every core, and 2 pipeline stages (1F1B,
// ZB-H1), beside the bare GEMM speed of its Linear layers' shapes. A token's forward is L (24 D^2 + 4 T D) + 2 D V
// FLOPs (scores over the full T x T: the mask applies after the product), training three times that.
namespace gpt_step {

struct step_time {
  double wall = 0.0, cpu = 0.0;
};

double forward_flops_per_token(const gpt_config& c) {
  const double d = double(c.dim), t = double(c.context);
  return double(c.layers) * (24.0 * d * d + 4.0 * t * d) + 2.0 * d * double(c.vocabulary);
}

// Median seconds per step after `warmup`, on consecutive batches.
step_time median_step_s(step_runner& runner, const dataset& d, std::size_t batch_size, int warmup, int steps) {
  const auto order = epoch_order(d.size(), 1, 0);
  std::vector<double> times, cpu;
  for (int s = 0; s < warmup + steps; ++s) {
    const batch b = make_batch(d, order, std::size_t(s) % batch_count(d.size(), batch_size), batch_size);
    const double c0 = bench::thread_cpu_seconds();
    const auto t0 = clock_type::now();
    runner.train_step(b.inputs, b.labels, std::uint64_t(s));
    if (s >= warmup) times.push_back(seconds_since(t0)), cpu.push_back(bench::thread_cpu_seconds() - c0);
  }
  return {median(times), median(cpu)};
}

// GFLOPS of the Linear layers' products (forward, dx, dW) for one batch of `rows` rows; with `by_product`, each
// kind's apart.
step_time bare_gemm_gflops(const gpt_config& c, std::size_t rows, int repeats, double* by_product = nullptr) {
  struct shape { std::size_t in, out; };
  std::vector<shape> shapes;
  for (std::size_t l = 0; l < c.layers; ++l)
    for (const shape s : {shape{c.dim, 3 * c.dim}, shape{c.dim, c.dim}, shape{c.dim, 4 * c.dim}, shape{4 * c.dim, c.dim}})
      shapes.push_back(s);
  shapes.push_back({c.dim, c.vocabulary});
  std::size_t widest = 0;
  for (const shape& s : shapes) widest = std::max({widest, s.in, s.out});
  std::vector<float> x(rows * widest, 0.25f), y(rows * widest, 0.5f), w(widest * widest, 0.125f), dw(widest * widest, 0.0f);
  double flops = 0.0;
  for (const shape& s : shapes) flops += 3.0 * 2.0 * double(rows) * double(s.in) * double(s.out);
  std::vector<double> times, cpu, kinds[3];
  for (int r = 0; r < repeats + 1; ++r) {
    const double c0 = bench::thread_cpu_seconds();
    const auto t0 = clock_type::now();
    double kind_s[3] = {0, 0, 0};
    for (const shape& s : shapes) {
      auto t = clock_type::now();
      gemm(false, false, rows, s.out, s.in, 1.0f, x.data(), w.data(), 0.0f, y.data());
      kind_s[0] += seconds_since(t), t = clock_type::now();
      gemm(false, true, rows, s.in, s.out, 1.0f, y.data(), w.data(), 0.0f, x.data());
      kind_s[1] += seconds_since(t), t = clock_type::now();
      gemm(true, false, s.in, s.out, rows, 1.0f, x.data(), y.data(), 1.0f, dw.data());
      kind_s[2] += seconds_since(t);
    }
    if (r > 0) {
      times.push_back(seconds_since(t0)), cpu.push_back(bench::thread_cpu_seconds() - c0);
      for (int k = 0; k < 3; ++k) kinds[k].push_back(kind_s[k]);
    }
  }
  for (int k = 0; by_product && k < 3; ++k) by_product[k] = flops / 3.0 / median(kinds[k]) * 1e-9;
  return {flops / median(times) * 1e-9, flops / median(cpu) * 1e-9};
}

struct row {
  std::string name;
  double tokens_per_s = 0.0, gflops = 0.0, bare_gflops = 0.0;
  double cpu_tokens_per_s = 0.0, cpu_gflops = 0.0, cpu_bare_gflops = 0.0;  // one thread: by thread CPU time
};

int run(bench::arguments& args) {
  const std::string spec = args.text("--model", "gpt:layers=4,dim=256,heads=8,context=128");
  const auto batch_size = static_cast<std::size_t>(args.integer("--batch", 16, 1));
  const int steps = static_cast<int>(args.integer("--steps", 10, 1)), warmup = static_cast<int>(args.integer("--warmup", 2));
  const int microbatches = static_cast<int>(args.integer("--microbatches", 4, 1));
  const std::string text = args.text("--text", default_text_path), only = args.text("--only", "");
  args.done();
  if (!only.empty() && only != "single" && only != "pipeline") throw bench::usage_error("--only takes single or pipeline, not " + only);
  keep_tensor_memory();
  const gpt_config config = parse_gpt_spec(spec);
  const text_corpus corpus = load_text_corpus(text);
  check_corpus_fills(corpus, config.context);
  const dataset data = text_windows(corpus.train, config.context, 64 * batch_size, 1, "train");
  const double tokens_per_step = double(batch_size * config.context);
  const double train_flops_per_token = 3.0 * forward_flops_per_token(config);
  const std::size_t rows = batch_size * config.context;
  optimizer_config adamw;
  adamw.kind = "adamw";
  adamw.lr = 1e-3f;
  adamw.weight_decay = 0.01f;
  std::printf("bench_ops gpt: %s, batch %zu sequences (%zu tokens), AdamW, fp32, %d steps after %d warm-up; "
              "%.2f MFLOP per token trained; load %s\n",
              spec.c_str(), batch_size, rows, steps, warmup, train_flops_per_token * 1e-6, load_average().c_str());
  std::vector<row> rows_out;
  const auto add = [&](const std::string& name, step_time step, step_time bare, bool one_thread) {
    row r{name, tokens_per_step / step.wall, tokens_per_step / step.wall * train_flops_per_token * 1e-9, bare.wall};
    std::printf("  %-34s %9.0f tokens/s  %6.1f GFLOPS  (bare GEMM %6.1f GFLOPS: %.2f)\n", r.name.c_str(), r.tokens_per_s,
                r.gflops, r.bare_gflops, r.bare_gflops > 0 ? r.gflops / r.bare_gflops : 0.0);
    if (one_thread) {
      r.cpu_tokens_per_s = tokens_per_step / step.cpu;
      r.cpu_gflops = r.cpu_tokens_per_s * train_flops_per_token * 1e-9;
      r.cpu_bare_gflops = bare.cpu;
      std::printf("  %-34s %9.0f tokens/s  %6.1f GFLOPS  (bare GEMM %6.1f GFLOPS: %.2f)\n", "  by thread CPU time",
                  r.cpu_tokens_per_s, r.cpu_gflops, r.cpu_bare_gflops, r.cpu_gflops / r.cpu_bare_gflops);
    }
    std::fflush(stdout);
    rows_out.push_back(r);
  };
  if (only.empty() || only == "single")
    for (const int threads : {1, single_process_threads()}) {
      set_compute_threads(threads);
      double by_product[3];
      const step_time bare = bare_gemm_gflops(config, rows, 3, by_product);
      std::printf("  bare GEMM on %d thread%s by product: y = x W %.1f, dx = dy W^T %.1f, dW += x^T dy %.1f GFLOPS\n",
                  threads, threads > 1 ? "s" : "", by_product[0], by_product[1], by_product[2]);
      sequential model = sequential::from_spec(spec);
      local_runner runner(model, adamw);
      add("one process, " + std::to_string(threads) + " thread" + (threads > 1 ? "s" : ""),
          median_step_s(runner, data, batch_size, warmup, steps), bare, threads == 1);
      if (single_process_threads() == 1) break;
    }
  if (only.empty() || only == "pipeline") {
    set_compute_threads(1);
    step_time bare = bare_gemm_gflops(config, rows / std::size_t(microbatches), 3);
    bare.wall *= 2;
    for (const std::string sched : {"1f1b", "zb-h1"}) {
      pipeline_options o;
      o.stages = 2;
      o.microbatches = microbatches;
      o.schedule = sched;
      o.optimizer = adamw;
      pipeline pipe(sequential::from_spec(spec), o);
      add("2 stages, m=" + std::to_string(microbatches) + ", " + sched + " (x2 cores)",
          median_step_s(pipe, data, batch_size, warmup, steps), bare, false);
    }
  }
  nlohmann::json out;
  out["bench"] = "bench_ops gpt";
  out["model"] = spec;
  out["batch"] = batch_size;
  out["mflop_per_token"] = train_flops_per_token * 1e-6;
  out["load_after"] = load_average();
  for (const row& r : rows_out)
    out["runs"].push_back({{"name", r.name}, {"tokens_per_s", r.tokens_per_s}, {"gflops", r.gflops},
                           {"bare_gemm_gflops", r.bare_gflops}, {"cpu_tokens_per_s", r.cpu_tokens_per_s},
                           {"cpu_gflops", r.cpu_gflops}, {"cpu_bare_gemm_gflops", r.cpu_bare_gflops}});
  std::printf("%s\n", out.dump().c_str());
  return 0;
}

}  // namespace gpt_step

// ---- bf16: fp32 against bf16 training (Note [compute dtype]) in one run
// On the heavy MLP (--model), each dtype in alternating rounds (Note [timing under load]):
//   - samples/s of a single process and of a 2-stage 1F1B pipeline;
//   - peak activation bytes: the single process's cache and each stage's peak stash;
//   - bytes on the wire per step between two in-process nodes by dtype (--no-nodes leaves them out);
//     coordinator traffic stays float32 in both;
//   - a GPT (--gpt SPEC; --no-gpt leaves it out): tokens/s of one process and 2 stages, and peak stash.
namespace bf16_training {

struct settings {
  int steps = 8, rounds = 3, threads = 0;
  bool nodes = true;
  std::string model = "784-2048-2048-2048-10";
  std::string gpt = "gpt:layers=4,dim=256,heads=8,context=128";
  std::size_t gpt_batch = 16;
  std::size_t batch = 256;
  int microbatches = 8;
};

const dtype both[] = {dtype::float32, dtype::bfloat16};

sequential make_model(const std::string& spec, dtype type) {
  sequential m = sequential::from_spec(spec, sequential_options{"relu", 1});
  m.set_compute_dtype(type);
  return m;
}

optimizer_config adam() {
  optimizer_config o;
  o.kind = "adam";
  o.lr = 1e-3f;
  return o;
}

// Seconds per step of `runner` on batches cycled from `d`.
double time_steps(step_runner& runner, const dataset& d, std::size_t batch, int steps, std::uint64_t& step) {
  const std::size_t batches = rows(d.inputs) / batch;
  const auto t0 = clock_type::now();
  for (int i = 0; i < steps; ++i, ++step) {
    const std::size_t b = step % batches;
    runner.train_step(slice_rows(d.inputs, b * batch, (b + 1) * batch), slice_rows(d.labels, b * batch, (b + 1) * batch),
                      step);
  }
  return seconds_since(t0) / steps;
}

// Two in-process nodes, stopped and destroyed on this thread.
struct local_nodes {
  std::vector<std::unique_ptr<caf::actor_system_config>> configs;
  std::vector<std::unique_ptr<caf::actor_system>> systems;
  std::vector<caf::actor> nodes;
  std::vector<std::string> addresses;
  explicit local_nodes(int n) {
    for (int i = 0; i < n; ++i) {
      configs.push_back(std::make_unique<caf::actor_system_config>());
      enable_network(*configs.back());
      configs.back()->set("scheduler.max-threads", 2);
      systems.push_back(std::make_unique<caf::actor_system>(*configs.back()));
      nodes.push_back(spawn_node(*systems.back(), node_options{}));
      auto port = systems.back()->middleman().publish(nodes.back(), 0, "127.0.0.1", true);
      if (!port) throw std::runtime_error("cannot publish a node: " + caf::to_string(port.error()));
      addresses.push_back("127.0.0.1:" + std::to_string(*port));
    }
  }
  ~local_nodes() {
    for (auto& n : nodes) caf::anon_send_exit(n, caf::exit_reason::user_shutdown);
    nodes.clear();
    systems.clear();
  }
};

struct pipeline_figures {
  std::vector<double> step_s;
  std::vector<std::uint64_t> peak_bytes;
  double wire_bytes_per_step[dtype_count] = {0, 0};
};

int run(bench::arguments& args) {
  settings s;
  s.steps = static_cast<int>(args.integer("--steps", s.steps, 1));
  s.rounds = static_cast<int>(args.integer("--rounds", s.rounds, 1));
  s.threads = static_cast<int>(args.integer("--threads", 0, 1));
  s.nodes = !args.flag("--no-nodes");
  s.model = args.text("--model", s.model);
  s.gpt = args.text("--gpt", s.gpt);
  if (args.flag("--no-gpt")) s.gpt.clear();
  args.done();
  keep_tensor_memory();
  const int threads = s.threads > 0 ? s.threads : single_process_threads();
  const dataset d = make_blobs(s.batch * 4, 784, 10, 7);
  std::printf("bench_ops bf16: model %s, batch %zu, Adam; load average before: %s\n", s.model.c_str(), s.batch,
              load_average().c_str());

  std::vector<double> single_s[2];
  std::uint64_t single_bytes[2] = {0, 0};
  {
    set_compute_threads(threads);
    std::vector<sequential> models;
    std::vector<std::unique_ptr<local_runner>> runners;
    for (dtype t : both) models.push_back(make_model(s.model, t));
    for (auto& m : models) runners.push_back(std::make_unique<local_runner>(m, adam()));
    std::uint64_t step[2] = {0, 0};
    for (int k = 0; k < 2; ++k) time_steps(*runners[k], d, s.batch, 2, step[k]);
    for (int r = 0; r < s.rounds; ++r)
      for (int k = 0; k < 2; ++k) single_s[k].push_back(time_steps(*runners[k], d, s.batch, s.steps, step[k]));
    for (int k = 0; k < 2; ++k) {
      sequential_cache cache;
      models[k].forward(slice_rows(d.inputs, 0, s.batch), cache, forward_context{true, 0, 0});
      single_bytes[k] = stashed_bytes(cache);
    }
  }

  // A 2-stage pipeline in this process, then on two nodes; each dtype's pipeline lives for its own block only
  // (Note [idle teams]).
  set_compute_threads(1);
  const auto run_pipeline = [&](const std::vector<std::string>& nodes, pipeline_figures (&out)[2]) {
    const auto make_pipe = [&](dtype t) {
      pipeline_options o;
      o.stages = 2;
      o.microbatches = s.microbatches;
      o.schedule = "1f1b";
      o.optimizer = adam();
      o.compute_dtype = t;
      o.nodes = nodes;
      o.security.insecure = true;
      return std::make_unique<pipeline>(make_model(s.model, dtype::float32), o);
    };
    std::uint64_t step[2] = {0, 0};
    for (int r = 0; r < s.rounds; ++r)
      for (int k = 0; k < 2; ++k) {
        const std::unique_ptr<pipeline> pipe = make_pipe(both[k]);
        time_steps(*pipe, d, s.batch, r == 0 ? 2 : 1, step[k]);
        std::uint64_t before[dtype_count];
        for (dtype t : both) before[static_cast<int>(t)] = wire_tensor_bytes_sent(t);
        out[k].step_s.push_back(time_steps(*pipe, d, s.batch, s.steps, step[k]));
        for (dtype t : both)
          out[k].wire_bytes_per_step[static_cast<int>(t)] =
              double(wire_tensor_bytes_sent(t) - before[static_cast<int>(t)]) / s.steps;
        out[k].peak_bytes = pipe->last_peak_stash_bytes();
      }
  };
  pipeline_figures staged[2], noded[2];
  run_pipeline({}, staged);
  if (s.nodes) {
    local_nodes n(2);
    run_pipeline(n.addresses, noded);
  }

  // The GPT: one process, then 2 stages (ZB-H1, m=4), dtypes alternating.
  std::vector<double> gpt_single[2], gpt_staged[2];
  std::vector<std::uint64_t> gpt_peak[2];
  std::size_t gpt_tokens = 0;
  if (!s.gpt.empty()) {
    std::vector<std::uint8_t> bytes(1 << 16);
    splitmix64 random(5);
    for (auto& b : bytes) b = static_cast<std::uint8_t>(random.next() % 96 + 32);
    const std::size_t ctx = parse_gpt_spec(s.gpt).context;
    const dataset text = text_windows(bytes, ctx, s.gpt_batch * 4, 3, "random bytes");
    gpt_tokens = s.gpt_batch * ctx;
    optimizer_config adamw = adam();
    adamw.kind = "adamw";
    adamw.weight_decay = 0.01f;
    {
      set_compute_threads(threads);
      std::vector<sequential> models;
      std::vector<std::unique_ptr<local_runner>> runners;
      for (dtype t : both) models.push_back(make_model(s.gpt, t));
      for (auto& m : models) runners.push_back(std::make_unique<local_runner>(m, adamw));
      std::uint64_t step[2] = {0, 0};
      for (int k = 0; k < 2; ++k) time_steps(*runners[k], text, s.gpt_batch, 2, step[k]);
      for (int r = 0; r < s.rounds; ++r)
        for (int k = 0; k < 2; ++k) gpt_single[k].push_back(time_steps(*runners[k], text, s.gpt_batch, s.steps, step[k]));
    }
    set_compute_threads(1);  // Note [idle teams]
    std::uint64_t step[2] = {0, 0};
    for (int r = 0; r < s.rounds; ++r)
      for (int k = 0; k < 2; ++k) {
        pipeline_options o;
        o.stages = 2;
        o.microbatches = 4;
        o.schedule = "zb-h1";
        o.optimizer = adamw;
        o.compute_dtype = both[k];
        pipeline pipe(make_model(s.gpt, dtype::float32), o);
        time_steps(pipe, text, s.gpt_batch, r == 0 ? 2 : 1, step[k]);
        gpt_staged[k].push_back(time_steps(pipe, text, s.gpt_batch, s.steps, step[k]));
        gpt_peak[k] = pipe.last_peak_stash_bytes();
      }
  }

  const auto per_s = [&](const std::vector<double>& v) { return double(s.batch) / median(v); };
  const auto mib = [](double b) { return b / (1024.0 * 1024.0); };
  nlohmann::json out;
  out["bench"] = "bench_ops bf16";
  std::printf("\n%-44s %14s %14s %8s\n", "", "fp32", "bf16", "bf16/fp32");
  const auto row = [&](const char* what, double a, double b) {
    std::printf("%-44s %11.1f    %11.1f    %8.2f\n", what, a, b, a > 0 ? b / a : 0.0);
  };
  char label[96];
  std::snprintf(label, sizeof label, "single process (%d threads), samples/s", threads);
  row(label, per_s(single_s[0]), per_s(single_s[1]));
  row("single process peak activations, MiB", mib(single_bytes[0]), mib(single_bytes[1]));
  row("2 stages (1F1B, m=8), samples/s", per_s(staged[0].step_s), per_s(staged[1].step_s));
  for (std::size_t st = 0; st < staged[0].peak_bytes.size(); ++st) {
    std::snprintf(label, sizeof label, "  stage %zu peak stashed activations, MiB", st);
    row(label, mib(staged[0].peak_bytes[st]), mib(staged[1].peak_bytes[st]));
  }
  out["single_process"] = {{"threads", threads},
                           {"samples_per_s", {per_s(single_s[0]), per_s(single_s[1])}},
                           {"speedup", per_s(single_s[1]) / per_s(single_s[0])},
                           {"peak_activation_bytes", {single_bytes[0], single_bytes[1]}}};
  out["two_stages"] = {{"samples_per_s", {per_s(staged[0].step_s), per_s(staged[1].step_s)}},
                       {"speedup", per_s(staged[1].step_s) / per_s(staged[0].step_s)},
                       {"peak_stash_bytes", {staged[0].peak_bytes, staged[1].peak_bytes}}};
  if (s.nodes) {
    // Coordinator traffic is float32 in both runs; the rest is between the stages.
    const double coordinator = noded[1].wire_bytes_per_step[0];
    const double between[2] = {noded[0].wire_bytes_per_step[0] - coordinator, noded[1].wire_bytes_per_step[1]};
    row("2 nodes (loopback), samples/s", per_s(noded[0].step_s), per_s(noded[1].step_s));
    row("bytes on the wire between stages, MiB/step", mib(between[0]), mib(between[1]));
    row("  coordinator <-> stages (float32), MiB/step", mib(coordinator), mib(coordinator));
    out["two_nodes"] = {{"samples_per_s", {per_s(noded[0].step_s), per_s(noded[1].step_s)}},
                        {"speedup", per_s(noded[1].step_s) / per_s(noded[0].step_s)},
                        {"wire_bytes_between_stages_per_step", {between[0], between[1]}},
                        {"wire_bytes_coordinator_per_step", coordinator}};
  }
  if (!s.gpt.empty()) {
    const auto tokens_s = [&](const std::vector<double>& v) { return double(gpt_tokens) / median(v); };
    std::printf("%s, batch %zu:\n", s.gpt.c_str(), s.gpt_batch);
    std::snprintf(label, sizeof label, "  single process (%d threads), tokens/s", threads);
    row(label, tokens_s(gpt_single[0]), tokens_s(gpt_single[1]));
    row("  2 stages (ZB-H1, m=4), tokens/s", tokens_s(gpt_staged[0]), tokens_s(gpt_staged[1]));
    for (std::size_t st = 0; st < gpt_peak[0].size(); ++st) {
      std::snprintf(label, sizeof label, "  stage %zu peak stashed activations, MiB", st);
      row(label, mib(gpt_peak[0][st]), mib(gpt_peak[1][st]));
    }
    out["gpt"] = {{"model", s.gpt},
                  {"single_tokens_per_s", {tokens_s(gpt_single[0]), tokens_s(gpt_single[1])}},
                  {"single_speedup", tokens_s(gpt_single[1]) / tokens_s(gpt_single[0])},
                  {"two_stages_tokens_per_s", {tokens_s(gpt_staged[0]), tokens_s(gpt_staged[1])}},
                  {"two_stages_speedup", tokens_s(gpt_staged[1]) / tokens_s(gpt_staged[0])},
                  {"peak_stash_bytes", {gpt_peak[0], gpt_peak[1]}}};
  }
  out["model"] = s.model;
  out["batch"] = s.batch;
  out["load_average_after"] = load_average();
  std::printf("load average after: %s\n", load_average().c_str());
  std::cout << out.dump() << std::endl;
  return 0;
}

}  // namespace bf16_training

}  // namespace

int main(int argc, char** argv) {
  return bench::run_mode(
      argc, argv, "bench_ops",
      {{"ops", "[--repeats N] [--only NAME] [--threads 1,2,...]",
        "every op outside the big GEMMs at 1, 2, 4 ... threads, with its parallel efficiency", ops_alone::run},
       {"gemm", "[--repeats R] [--quick]", "the MLPs' products on oneDNN fp32 and bf16 against xtensor-blas, 1 thread",
        gemm_backends::run},
       {"gemm-threads", "[--threads 4,16] [--repeats N]",
        "the GPT's and the MLP's products as one N-thread call against N one-thread bands of rows", gemm_bands::run},
       {"convert", "[--repeats R] [--elements N]", "float32 <-> bfloat16 conversions against oneDNN's reorder",
        conversions::run},
       {"step", "[--quick] [--heavy-steps N] [--model small|heavy] [--breakdown] [--data DIR] [--threads T]",
        "the MLPs' training step on Fashion-MNIST against the bare GEMMs of its shapes", mlp_step::run},
       {"gpt", "[--model SPEC] [--batch N] [--steps N] [--warmup N] [--microbatches M] [--text PATH] [--only single|pipeline]",
        "a GPT's training step (one process, 2 stages) against the bare GEMMs of its Linear layers", gpt_step::run},
       {"bf16", "[--steps N] [--rounds R] [--threads T] [--no-nodes] [--model SPEC] [--gpt SPEC | --no-gpt]",
        "fp32 against bf16: samples/s, stashes, bytes on the wire", bf16_training::run}});
}

// GPT-2 in libtorch: the reference for `actorpipe train --model gpt2...` (throughput and loss curve). Built only
// where CMake finds Torch; scripts/compare_libtorch.sh runs both.

// nanoGPT's model in libtorch modules with GPT-2's initialisation. The spec is parsed by model/gpt_spec.hpp so
// `--model` means the same shape on both sides; choices not written here (RMSNorm, rotary, SwiGLU, GQA,
// init=kaiming) are refused.

// The data comes from the project's data library in train's order, so both sides see the same batches. AdamW
// with train's learning-rate schedule and gradient-norm clipping; weight decay on every parameter, or with
// --decay-matrices-only on weights of two or more dimensions (nanoGPT's groups).

// --save-init FILE writes the initial weights as llm.c's checkpoint for `train --init-from FILE`: both sides then
// start from the same weights and their losses differ by rounding alone.

// --log FILE writes one JSON object per step with train's keys.

//   build/bench/libtorch_gpt2 --model gpt2:context=128 --data tokens.bin --batch-size 4 --max-steps 200
//       --lr 6e-4 --warmup-steps 20 --lr-schedule cosine --min-lr 6e-5 --beta2 0.95 --weight-decay 0.1
//       --clip-grad-norm 1 --threads 2
#include <ATen/autocast_mode.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <iostream>
#include <stdexcept>
#include <string>
#include <vector>

#include "data/data_source.hpp"
#include "data/open_data.hpp"
#include "model/gpt_spec.hpp"

namespace {

struct options {
  std::string model = "gpt2";
  std::string data;
  std::size_t batch_size = 4;
  std::size_t max_steps = 10;
  std::uint64_t seed = 1;       // window starts and order, as train's --seed
  std::uint64_t init_seed = 1;  // torch::manual_seed
  std::string optimizer = "adamw";
  double lr = 3e-4, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.0, clip = 0.0, min_lr = 0.0;
  std::string schedule = "constant";
  std::size_t warmup = 0, decay_steps = 0;
  bool decay_matrices_only = false;
  int threads = 2;
  std::string dtype = "fp32";
  std::size_t validation_windows = 16;
  double validation_fraction = 0.1;
  std::string log;
  std::string save_init;
};

// train's schedule (model/lr_schedule.cpp lr_at).
double lr_at(const options& o, std::size_t step) {
  if (step < o.warmup) return o.lr * double(step + 1) / double(o.warmup);
  if (o.schedule == "cosine" || o.schedule == "linear") {
    if (step >= o.decay_steps) return o.min_lr;
    const double progress = double(step - o.warmup) / double(o.decay_steps - o.warmup);
    const double c = o.schedule == "cosine" ? 0.5 * (1.0 + std::cos(M_PI * progress)) : 1.0 - progress;
    return o.min_lr + c * (o.lr - o.min_lr);
  }
  return o.lr;
}

struct block_impl : torch::nn::Module {
  block_impl(const ap::gpt_config& c)
      : heads(std::int64_t(c.heads)),
        ln1(register_module("ln1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({std::int64_t(c.dim)}).eps(1e-5).elementwise_affine(true)))),
        ln2(register_module("ln2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({std::int64_t(c.dim)}).eps(1e-5).elementwise_affine(true)))),
        qkv(register_module("qkv", torch::nn::Linear(torch::nn::LinearOptions(c.dim, 3 * c.dim).bias(c.bias)))),
        proj(register_module("proj", torch::nn::Linear(torch::nn::LinearOptions(c.dim, c.dim).bias(c.bias)))),
        fc(register_module("fc", torch::nn::Linear(torch::nn::LinearOptions(c.dim, c.mlp_width()).bias(c.bias)))),
        out(register_module("out", torch::nn::Linear(torch::nn::LinearOptions(c.mlp_width(), c.dim).bias(c.bias)))),
        gelu(c.gelu == "exact" ? "none" : "tanh") {}

  torch::Tensor forward(torch::Tensor x, const torch::Tensor& future) {
    const auto B = x.size(0), T = x.size(1), C = x.size(2), d = C / heads;
    auto parts = qkv(ln1(x)).split(C, -1);
    const auto split = [&](const torch::Tensor& t) { return t.view({B, T, heads, d}).transpose(1, 2); };
    const torch::Tensor q = split(parts[0]), k = split(parts[1]), v = split(parts[2]);
    torch::Tensor att = torch::matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(double(d)));
    // The causal softmax in fp32, as train's.
    att = torch::softmax(att.to(torch::kFloat).masked_fill(future.slice(0, 0, T).slice(1, 0, T), -INFINITY), -1);
    torch::Tensor y = torch::matmul(att.to(v.scalar_type()), v).transpose(1, 2).contiguous().view({B, T, C});
    x = x + proj(y);
    return x + out(torch::gelu(fc(ln2(x)), gelu));
  }

  std::int64_t heads;
  torch::nn::LayerNorm ln1, ln2;
  torch::nn::Linear qkv, proj, fc, out;
  std::string gelu;
};
TORCH_MODULE_IMPL(block, block_impl);

struct gpt_impl : torch::nn::Module {
  explicit gpt_impl(const ap::gpt_config& c)
      : wte(register_module("wte", torch::nn::Embedding(c.vocabulary, c.dim))),
        wpe(register_module("wpe", torch::nn::Embedding(c.context, c.dim))),
        ln_f(register_module("ln_f", torch::nn::LayerNorm(torch::nn::LayerNormOptions({std::int64_t(c.dim)}).eps(1e-5)))),
        future(register_buffer("future", torch::ones({std::int64_t(c.context), std::int64_t(c.context)}, torch::kBool).triu(1))) {
    for (std::size_t i = 0; i < c.layers; ++i) blocks.push_back(register_module("h" + std::to_string(i), block(c)));
    if (!c.tied)
      head = register_module("lm_head", torch::nn::Linear(torch::nn::LinearOptions(c.dim, c.vocabulary).bias(c.bias)));
    // Note [GPT-2 initialisation].
    torch::NoGradGuard no_grad;
    const double residual = 0.02 / std::sqrt(2.0 * double(c.layers));
    for (auto& m : modules(/*include_self=*/false)) {
      if (auto* l = m->as<torch::nn::Linear>()) {
        torch::nn::init::normal_(l->weight, 0.0, 0.02);
        if (l->bias.defined()) torch::nn::init::zeros_(l->bias);
      } else if (auto* e = m->as<torch::nn::Embedding>()) {
        torch::nn::init::normal_(e->weight, 0.0, 0.02);
      }
    }
    for (auto& b : blocks) {
      torch::nn::init::normal_(b->proj->weight, 0.0, residual);
      torch::nn::init::normal_(b->out->weight, 0.0, residual);
    }
  }

  // Logits (B, T, V) of tokens (B, T).
  torch::Tensor forward(const torch::Tensor& tokens) {
    const auto T = tokens.size(1);
    torch::Tensor x = wte(tokens) + wpe(torch::arange(T, torch::kLong));
    for (auto& b : blocks) x = b(x, future);
    x = ln_f(x);
    return head ? head(x) : torch::nn::functional::linear(x, wte->weight);  // tied: the embedding's table
  }

  torch::nn::Embedding wte, wpe;
  std::vector<block> blocks;
  torch::nn::LayerNorm ln_f;
  torch::nn::Linear head{nullptr};
  torch::Tensor future;
};
TORCH_MODULE_IMPL(gpt, gpt_impl);

ap::gpt_config model_config(const std::string& spec) {
  ap::gpt_config c = ap::parse_gpt_spec(spec);
  const auto refuse = [&](const std::string& what) {
    throw std::invalid_argument("libtorch_gpt2: model '" + spec + "': " + what +
                                " is not written in this program (GPT-2's choices only)");
  };
  if (c.norm != "layer") refuse("norm=" + c.norm);
  if (c.pos != "learned") refuse("pos=" + c.pos);
  if (c.act != "gelu") refuse("act=" + c.act);
  if (c.kv_width() != c.heads) refuse("kv_heads");
  if (c.init != "gpt2") refuse("init=" + c.init);
  return c;
}

// Writes the weights as llm.c's checkpoint, version 3 (Note [GPT-2 weight files]), for `train --init-from`.
void write_llmc(const std::string& path, gpt_impl& m, const ap::gpt_config& c) {
  if (!c.tied || !c.bias || c.gelu != "tanh" || c.mlp_width() != 4 * c.dim)
    throw std::invalid_argument("libtorch_gpt2: --save-init: llm.c's checkpoint holds GPT-2's choices only (tied, "
                                "biases, tanh GELU, an MLP of 4 x dim)");
  std::ofstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("libtorch_gpt2: cannot write --save-init " + path);
  const std::int64_t padded = std::int64_t((c.vocabulary + 127) / 128 * 128);
  std::vector<std::int32_t> header(256, 0);
  header[0] = 20240326, header[1] = 3, header[2] = std::int32_t(c.context), header[3] = std::int32_t(c.vocabulary);
  header[4] = std::int32_t(c.layers), header[5] = std::int32_t(c.heads), header[6] = std::int32_t(c.dim);
  header[7] = std::int32_t(padded);
  f.write(reinterpret_cast<const char*>(header.data()), std::streamsize(header.size() * sizeof(std::int32_t)));
  const auto put = [&](const torch::Tensor& t) {
    const torch::Tensor x = t.detach().to(torch::kFloat).contiguous();
    f.write(reinterpret_cast<const char*>(x.data_ptr<float>()), std::streamsize(x.numel() * sizeof(float)));
  };
  put(m.wte->weight);
  put(torch::zeros({padded - std::int64_t(c.vocabulary), std::int64_t(c.dim)}));  // the padded rows
  put(m.wpe->weight);
  const std::vector<std::function<torch::Tensor(block_impl&)>> kinds = {
      [](block_impl& b) { return b.ln1->weight; },  [](block_impl& b) { return b.ln1->bias; },
      [](block_impl& b) { return b.qkv->weight; },  [](block_impl& b) { return b.qkv->bias; },
      [](block_impl& b) { return b.proj->weight; }, [](block_impl& b) { return b.proj->bias; },
      [](block_impl& b) { return b.ln2->weight; },  [](block_impl& b) { return b.ln2->bias; },
      [](block_impl& b) { return b.fc->weight; },   [](block_impl& b) { return b.fc->bias; },
      [](block_impl& b) { return b.out->weight; },  [](block_impl& b) { return b.out->bias; }};
  for (const auto& kind : kinds)
    for (auto& b : m.blocks) put(kind(*b));
  put(m.ln_f->weight);
  put(m.ln_f->bias);
  if (!f) throw std::runtime_error("libtorch_gpt2: writing --save-init " + path + " failed");
}

// A batch of the project's data as int64 tensors.
std::pair<torch::Tensor, torch::Tensor> to_torch(const ap::batch& b) {
  const auto convert = [](const ap::tensor& t) {
    std::vector<std::int64_t> shape(t.shape().begin(), t.shape().end());
    torch::Tensor out = torch::empty(shape, torch::kLong);
    const float* p = t.data();
    std::int64_t* q = out.data_ptr<std::int64_t>();
    for (std::size_t i = 0; i < t.size(); ++i) q[i] = std::int64_t(p[i]);
    return out;
  };
  return {convert(b.inputs), convert(b.labels)};
}

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int run(const options& o) {
  const ap::gpt_config c = model_config(o.model);
  if (o.dtype != "fp32" && o.dtype != "bf16")
    throw std::invalid_argument("libtorch_gpt2: --dtype must be fp32 or bf16, got '" + o.dtype + "'");
  if ((o.schedule == "cosine" || o.schedule == "linear") && o.decay_steps <= o.warmup)
    throw std::invalid_argument("libtorch_gpt2: --decay-steps " + std::to_string(o.decay_steps) +
                                " must be above --warmup-steps " + std::to_string(o.warmup) + " for " + o.schedule);
  torch::set_num_threads(o.threads);
  torch::manual_seed(o.init_seed);

  ap::data_config dc;
  dc.path = o.data;
  dc.validation_fraction = o.validation_fraction;
  const ap::data_sets data = ap::open_data(dc, c.context, c.vocabulary, o.seed, o.validation_windows);
  const std::size_t batches = ap::batch_count(data.train->size(), o.batch_size);
  std::cout << "data: " << data.train->name() << ", " << data.train->size() << " training windows\n";

  gpt model(c);
  std::size_t parameters = 0;
  std::vector<torch::Tensor> decayed, plain;
  for (const auto& p : model->parameters()) {
    parameters += std::size_t(p.numel());
    (o.decay_matrices_only && p.dim() < 2 ? plain : decayed).push_back(p);
  }
  std::cout << "model: " << ap::gpt_spec_text(c) << ", " << parameters << " parameters, libtorch "
            << TORCH_VERSION << ", " << torch::get_num_threads() << " threads, " << o.dtype << "\n";
  const double wd = o.optimizer == "adamw" ? o.weight_decay : 0.0;
  if (o.optimizer != "adamw" && o.optimizer != "adam")
    throw std::invalid_argument("libtorch_gpt2: --optimizer must be adamw or adam, got '" + o.optimizer + "'");
  if (o.optimizer == "adam" && o.weight_decay != 0.0)
    throw std::invalid_argument("libtorch_gpt2: --weight-decay with --optimizer adam is L2, not written here: use adamw");
  auto opts = torch::optim::AdamWOptions(o.lr).betas({o.beta1, o.beta2}).eps(o.eps).weight_decay(wd);
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(decayed, std::make_unique<torch::optim::AdamWOptions>(opts));
  if (!plain.empty())
    groups.emplace_back(plain, std::make_unique<torch::optim::AdamWOptions>(torch::optim::AdamWOptions(opts).weight_decay(0.0)));
  torch::optim::AdamW optimizer(std::move(groups), opts);

  if (!o.save_init.empty()) {
    write_llmc(o.save_init, *model, c);
    std::cout << "initial weights written to " << o.save_init << " (llm.c's checkpoint, for train --init-from)\n";
  }
  std::ofstream log;
  if (!o.log.empty()) {
    log.open(o.log);
    if (!log) throw std::runtime_error("libtorch_gpt2: cannot write --log " + o.log);
  }
  if (o.dtype == "bf16") {
    at::autocast::set_autocast_cpu_dtype(at::kBFloat16);
  }
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  std::vector<double> step_seconds;
  double last_loss = 0.0;
  std::size_t tokens_total = 0;
  for (std::size_t step = 0; step < o.max_steps; ++step) {
    const std::size_t epoch = step / batches, b = step % batches;
    const ap::sample_order order(data.train->size(), o.seed, epoch);  // train's order (Note [lazy epoch order])
    const auto [x, y] = to_torch(ap::gather_batch(*data.train, order, b, o.batch_size));
    const double lr = lr_at(o, step);
    for (auto& g : optimizer.param_groups()) g.options().set_lr(lr);
    const auto t0 = clock::now();
    torch::Tensor logits;
    {
      at::autocast::set_cpu_enabled(o.dtype == "bf16");
      logits = model(x);
      at::autocast::set_cpu_enabled(false);
      at::autocast::clear_cache();
    }
    torch::Tensor loss = torch::nn::functional::cross_entropy(logits.to(torch::kFloat).view({-1, logits.size(-1)}), y.view(-1));
    optimizer.zero_grad();
    loss.backward();
    if (o.clip > 0) torch::nn::utils::clip_grad_norm_(model->parameters(), o.clip);
    optimizer.step();
    const double seconds = std::chrono::duration<double>(clock::now() - t0).count();
    last_loss = loss.item<double>();
    step_seconds.push_back(seconds);
    const std::size_t tokens = std::size_t(y.numel());
    tokens_total += tokens;
    std::printf("step %zu  loss %.4f  lr %.3e  %.2f s  %.1f tokens/s\n", step, last_loss, lr, seconds, double(tokens) / seconds);
    std::fflush(stdout);
    if (log) {
      char line[256];
      std::snprintf(line, sizeof line,
                    "{\"step\":%zu,\"epoch\":%zu,\"batch\":%zu,\"loss\":%.9g,\"lr\":%.9g,\"step_s\":%.6f,\"tokens_per_s\":%.6f}",
                    step, epoch, b, last_loss, lr, seconds, double(tokens) / seconds);
      log << line << "\n" << std::flush;
    }
    if (!std::isfinite(last_loss)) throw std::runtime_error("libtorch_gpt2: step " + std::to_string(step) + ": loss is not finite");
  }
  const double wall = std::chrono::duration<double>(clock::now() - start).count();

  double validation = 0.0;
  if (data.validation && data.validation->size() > 0) {
    torch::NoGradGuard no_grad;
    double sum = 0.0;
    std::size_t labels = 0;
    for (std::size_t b = 0; b < ap::batch_count(data.validation->size(), o.batch_size); ++b) {
      const auto [x, y] = to_torch(ap::gather_in_order(*data.validation, b, o.batch_size));
      at::autocast::set_cpu_enabled(o.dtype == "bf16");
      torch::Tensor logits = model(x);
      at::autocast::set_cpu_enabled(false);
      at::autocast::clear_cache();
      sum += torch::nn::functional::cross_entropy(logits.to(torch::kFloat).view({-1, logits.size(-1)}), y.view(-1)).item<double>() *
             double(y.numel());
      labels += std::size_t(y.numel());
    }
    validation = sum / double(labels);
    std::printf("end: validation loss %.5f nats/token over %zu windows\n", validation, data.validation->size());
  }
  const double median_s = median(step_seconds);
  const double tokens_per_step = step_seconds.empty() ? 0.0 : double(tokens_total) / double(step_seconds.size());
  std::printf(
      "{\"library\":\"libtorch %s\",\"model\":\"%s\",\"parameters\":%zu,\"dtype\":\"%s\",\"threads\":%d,\"batch_size\":%zu,"
      "\"steps\":%zu,\"median_step_s\":%.6f,\"median_tokens_per_s\":%.4f,\"tokens_per_s\":%.4f,\"last_step_loss\":%.9g,"
      "\"validation_loss\":%.9g,\"wall_s\":%.3f}\n",
      TORCH_VERSION, o.model.c_str(), parameters, o.dtype.c_str(), torch::get_num_threads(), o.batch_size,
      step_seconds.size(), median_s, median_s > 0 ? tokens_per_step / median_s : 0.0,
      wall > 0 ? double(tokens_total) / wall : 0.0, last_loss, validation, wall);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  options o;
  CLI::App app{"GPT-2 in libtorch on a token file, with train's flags (the comparison for actorpipe train --model gpt2)"};
  app.add_option("--model", o.model, "a gpt spec or preset, read by the project's parser (gpt2, gpt2:context=128)");
  app.add_option("--data", o.data, "a token file (llm.c .bin, raw uint16) or text, as train's --data")->required();
  app.add_option("--batch-size", o.batch_size, "windows per step")->check(CLI::PositiveNumber);
  app.add_option("--max-steps", o.max_steps, "steps to train")->check(CLI::PositiveNumber);
  app.add_option("--seed", o.seed, "window starts and order, as train's");
  app.add_option("--init-seed", o.init_seed, "torch::manual_seed");
  app.add_option("--optimizer", o.optimizer, "adamw or adam");
  app.add_option("--lr", o.lr, "the peak learning rate")->check(CLI::PositiveNumber);
  app.add_option("--beta1", o.beta1, "Adam's first moment decay")->check(CLI::Range(0.0, 0.999999));
  app.add_option("--beta2", o.beta2, "Adam's second moment decay")->check(CLI::Range(0.0, 0.999999));
  app.add_option("--weight-decay", o.weight_decay, "AdamW's decoupled decay")->check(CLI::NonNegativeNumber);
  app.add_flag("--decay-matrices-only", o.decay_matrices_only, "decay only weights of 2 or more dimensions (nanoGPT's groups)");
  app.add_option("--clip-grad-norm", o.clip, "clip to this global norm (0: no clipping)")->check(CLI::NonNegativeNumber);
  app.add_option("--lr-schedule", o.schedule, "constant, cosine or linear")->check(CLI::IsMember({"constant", "cosine", "linear"}));
  app.add_option("--warmup-steps", o.warmup, "steps of linear warmup, lr (s + 1) / warmup");
  app.add_option("--decay-steps", o.decay_steps, "cosine and linear: the step at which the lr reaches --min-lr (0: --max-steps)");
  app.add_option("--min-lr", o.min_lr, "cosine and linear: the lr at the end of the decay")->check(CLI::NonNegativeNumber);
  app.add_option("--threads", o.threads, "intra-op threads")->check(CLI::PositiveNumber);
  app.add_option("--dtype", o.dtype, "fp32, or bf16 (CPU autocast; softmax and loss in fp32)");
  app.add_option("--validation-windows", o.validation_windows, "windows of the held-out tokens evaluated at the end")
      ->check(CLI::PositiveNumber);
  app.add_option("--validation-fraction", o.validation_fraction, "the held-out last fraction of the token file")
      ->check(CLI::Range(0.0, 0.999999));
  app.add_option("--log", o.log, "one JSON object per step (train's --log keys)");
  app.add_option("--save-init", o.save_init, "write the initial weights as llm.c's checkpoint (train --init-from reads it)");
  CLI11_PARSE(app, argc, argv);
  if (o.decay_steps == 0) o.decay_steps = o.max_steps;
  try {
    return run(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "libtorch_gpt2: %s\n", e.what());
    return 1;
  }
}

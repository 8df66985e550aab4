// Seed 003's example as written: its Transformer (vocabulary 50,000, hidden 1,024, 24 layers, 16 heads) split over
// 4 stages, 8 microbatches, interleaved 1F1B with 2 chunks per stage (vpp 2), Adam at lr 1e-3, trained a few steps
// on token data: a token file (llm.c's .bin, or raw uint16 as nanoGPT writes) when given, else the fortunes' bytes
// as token ids.
//
//   transformer_pipeline [--steps N] [--context T] [--microbatch-size B] [--tokens FILE] [--small]
//
// The seed's sizes are the defaults but for the microbatch size (1 sequence; the seed's 8 x 512 tokens a
// microbatch take 8 times as long a step). --small keeps the shape (24 layers, vocabulary 50,000, 4 stages,
// 8 microbatches, vpp 2) at width 64 and context 32, as the suite runs it.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "actors/pipeline.hpp"
#include "data/data_source.hpp"
#include "data/text_corpus.hpp"
#include "data/token_file.hpp"
#include "data/token_windows.hpp"
#include "model/gpt_spec.hpp"

int main(int argc, char** argv) {
  int steps = 3;
  std::size_t context = 512, microbatch_size = 1;
  std::string tokens_path;
  bool small = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const auto value = [&] {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return std::string(argv[++i]);
    };
    if (a == "--steps") steps = std::atoi(value().c_str());
    else if (a == "--context") context = std::strtoul(value().c_str(), nullptr, 10);
    else if (a == "--microbatch-size") microbatch_size = std::strtoul(value().c_str(), nullptr, 10);
    else if (a == "--tokens") tokens_path = value();
    else if (a == "--small") small = true;
    else {
      std::fprintf(stderr, "unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  if (small) context = 32;
  // 1. The whole model: token embedding, positions, 24 decoder blocks, final LayerNorm, LM head (28 layers).
  const std::string spec = small ? "gpt:layers=24,dim=64,heads=4,vocab=50000,context=" + std::to_string(context)
                                 : "gpt:layers=24,dim=1024,heads=16,vocab=50000,context=" + std::to_string(context);
  ap::sequential model = ap::sequential::from_spec(spec, ap::sequential_options{"relu", /*seed=*/1});
  std::printf("%s: %zu parameters\n", spec.c_str(), model.parameter_count());

  // 2.-4. PipelineParallel(model, 4 stages, 8 microbatches, vpp 2) with Adam at lr 1e-3: chunk c of 8 on stage c % 4.
  ap::pipeline_options options;
  options.stages = 4;
  options.microbatches = 8;
  options.chunks_per_stage = 2;
  options.schedule = "interleaved";
  options.optimizer.kind = "adam";
  options.optimizer.lr = 1e-3f;
  ap::pipeline pipe(model, options);
  for (std::size_t c = 0; c < pipe.chunk_ranges().size(); ++c)
    std::printf("chunk %zu on stage %zu: layers %zu..%zu\n", c, c % 4, pipe.chunk_ranges()[c].begin,
                pipe.chunk_ranges()[c].end - 1);

  // 5. Token windows of context + 1: inputs and next-token labels.
  ap::token_span tokens;
  std::vector<std::uint8_t> text;
  if (!tokens_path.empty()) {
    tokens = ap::open_token_file(tokens_path, ap::has_llmc_magic(tokens_path) ? ap::token_file_kind::llmc : ap::token_file_kind::raw);
  } else {
    text = ap::load_text_corpus(ap::default_text_path).train;
    tokens = ap::token_span{text.data(), text.size(), 1, nullptr, false};
  }
  const std::size_t batch = 8 * microbatch_size;
  const auto windows = ap::token_windows(tokens, context, batch * std::size_t(steps), /*seed=*/1, 50000, "tokens");

  // 6. The training loop: cross-entropy over every token (the pipeline's default loss).
  for (int step = 0; step < steps; ++step) {
    const ap::batch b = ap::gather_in_order(*windows, static_cast<std::size_t>(step), batch);
    const auto begin = std::chrono::steady_clock::now();
    const float loss = pipe.train_step(b.inputs, b.labels, static_cast<std::uint64_t>(step));
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
    std::printf("step %d: loss %.4f, %.1f s, %.0f tokens/s\n", step, loss, seconds, double(batch * context) / seconds);
  }
}

// The pipeline API on a real Transformer: a 24-block GPT on 4 stages, 8 microbatches, interleaved
// 1F1B with 2 chunks per stage (vpp 2), AdamW, trained on the fortunes (bytes); prints the loss, the validation
// loss and a sampled text.
#include <cstdio>
#include <cstdlib>

#include "actors/pipeline.hpp"
#include "data/text_corpus.hpp"
#include "model/gpt_spec.hpp"
#include "model/text_generation.hpp"

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 100;
  const ap::gpt_config gpt = ap::parse_gpt_spec("gpt:layers=24,dim=64,heads=4,context=64");
  const ap::text_corpus corpus = ap::load_text_corpus(ap::default_text_path);
  const ap::dataset train_set = ap::text_windows(corpus.train, gpt.context, corpus.train.size() / gpt.context, 1, "train");
  const ap::dataset validation = ap::text_windows_in_order(corpus.validation, gpt.context, 64, "validation");

  // 1. The whole model: embedding, position, 24 decoder blocks, final LayerNorm, LM head (28 elements).
  ap::sequential model = ap::sequential::from_layer_specs(ap::gpt_layer_specs(gpt));
  model.initialize(/*seed=*/1);
  // 2.-4. PipelineParallel(model, 4 stages, 8 microbatches, vpp 2): chunk c of 8 on stage c % 4, whole blocks.
  ap::pipeline_options options;
  options.stages = 4;
  options.microbatches = 8;
  options.chunks_per_stage = 2;
  options.schedule = "interleaved";
  options.optimizer.kind = "adamw";
  options.optimizer.lr = 2e-3f;
  ap::pipeline pipe(model, options);
  const ap::stage_info first = ap::get_stage_info(model.size(), 4, 0, 2);
  std::printf("stage 0 holds chunks %d and %d: layers %zu..%zu and %zu..%zu of %zu\n", first.chunks[0], first.chunks[1],
              first.layer_ranges_per_chunk[0].begin, first.layer_ranges_per_chunk[0].end - 1,
              first.layer_ranges_per_chunk[1].begin, first.layer_ranges_per_chunk[1].end - 1, model.size());

  // 5.-6. The loss is token-level cross-entropy (the pipeline's default loss); the training loop.
  const std::size_t batch_size = 16;
  const auto order = ap::epoch_order(train_set.size(), /*seed=*/1, /*epoch=*/0);
  for (int step = 0; step < steps; ++step) {
    const ap::batch b = ap::make_batch(train_set, order, static_cast<std::size_t>(step), batch_size);
    const float loss = pipe.train_step(b.inputs, b.labels, static_cast<std::uint64_t>(step));
    if (step % 20 == 0 || step + 1 == steps) std::printf("step %d: loss %.4f nats/byte\n", step, loss);
  }
  std::printf("validation loss %.4f nats/byte\n", ap::evaluate_loss(pipe, validation));
  std::printf("sample: %s\n", ap::generate_text(pipe.gather_model(), gpt.context, "The ", 80, 0.8f, 7).c_str());
}

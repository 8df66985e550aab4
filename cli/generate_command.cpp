// `actorpipe generate`: samples text from a GPT checkpoint (of any stage count) or GPT-2's weights (--init-from),
// printing the prompt and the sampled bytes; with a tokenizer it samples token ids and prints their bytes.
#include <algorithm>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <vector>

#include "checkpoint/checkpoint.hpp"
#include "checkpoint/gpt2_weights.hpp"
#include "cli/checks.hpp"
#include "cli/commands.hpp"
#include "model/gpt_spec.hpp"
#include "model/text_generation.hpp"
#include "tensor/compute.hpp"
#include "tensor/tensor.hpp"
#include "tokenizer/bpe.hpp"
#include "tokenizer/llmc_tokenizer.hpp"

namespace ap::cli {
namespace {

struct generate_options {
  std::string checkpoint;
  std::string init_from;
  std::string prompt;
  std::size_t tokens = 200;
  float temperature = 0.8f;
  std::uint64_t seed = 1;
  std::string tokenizer;
  std::string vocab, merges;
};

// `ids` followed by `tokens` sampled ids, each from the first `limit` logits at the last position of the last
// `context` ids (so a padded vocabulary never yields the padding).
std::vector<std::uint32_t> generate_ids(const sequential& model, std::size_t context, std::vector<std::uint32_t> ids,
                                        std::size_t tokens, std::size_t limit, float temperature, std::uint64_t seed) {
  splitmix64 random(seed);
  for (std::size_t n = 0; n < tokens; ++n) {
    const std::size_t t = std::min(context, ids.size());
    tensor input = tensor::from_shape({1, t});  // (1, sequence)
    for (std::size_t i = 0; i < t; ++i) input.data()[i] = float(ids[ids.size() - t + i]);
    const tensor logits = model.forward(input);  // (1, sequence, vocabulary)
    const std::size_t vocabulary = cols(logits);
    ids.push_back(static_cast<std::uint32_t>(
        sample_token(logits.data() + (t - 1) * vocabulary, std::min(limit, vocabulary), temperature, random)));
  }
  return ids;
}

// A token model's text: the encoded prompt (GPT-2's BPE; llm.c's tokenizer file only decodes), or else a start
// token, not printed: <|endoftext|> if the model has it, else "\n".
std::string generate_token_text(const generate_options& o, const sequential& model, const gpt_config& gpt) {
  std::optional<bpe_tokenizer> bpe;
  std::optional<llmc_tokenizer> llmc;
  std::function<std::string(const std::vector<std::uint32_t>&)> decode;
  std::size_t tokenizer_size = 0;
  std::vector<std::uint32_t> prompt, starts;
  if (!o.tokenizer.empty()) {
    llmc = llmc_tokenizer::read(o.tokenizer);
    if (!o.prompt.empty())
      throw std::invalid_argument("--prompt with --tokenizer " + o.tokenizer +
                                  ": llm.c's tokenizer file only decodes; give --vocab and --merges to encode a prompt");
    decode = [&](const std::vector<std::uint32_t>& ids) { return llmc->decode(ids); };
    tokenizer_size = llmc->vocab_size();
    if (llmc->end_of_text) starts.push_back(*llmc->end_of_text);
    const auto newline = std::find(llmc->tokens.begin(), llmc->tokens.end(), "\n");
    if (newline != llmc->tokens.end()) starts.push_back(std::uint32_t(newline - llmc->tokens.begin()));
  } else {
    bpe = bpe_tokenizer::from_files(o.vocab, o.merges);
    decode = [&](const std::vector<std::uint32_t>& ids) { return bpe->decode(ids); };
    tokenizer_size = bpe->vocab_size();
    prompt = bpe->encode(o.prompt);
    if (const auto eot = bpe->find_token("<|endoftext|>")) starts.push_back(*eot);
    starts.push_back(bpe->encode("\n").front());
  }
  for (const std::uint32_t id : prompt)
    if (id >= gpt.vocabulary)
      throw std::invalid_argument("--prompt encodes to the token id " + std::to_string(id) +
                                  ", which the model's vocabulary of " + std::to_string(gpt.vocabulary) + " lacks");
  const bool started = prompt.empty();
  if (started) {
    const auto start = std::find_if(starts.begin(), starts.end(), [&](std::uint32_t id) { return id < gpt.vocabulary; });
    if (start == starts.end())
      throw std::invalid_argument("the tokenizer has neither <|endoftext|> nor \"\\n\" among the model's " +
                                  std::to_string(gpt.vocabulary) + " tokens to start from: give --prompt");
    prompt.push_back(*start);
  }
  std::vector<std::uint32_t> ids =
      generate_ids(model, gpt.context, std::move(prompt), o.tokens, tokenizer_size, o.temperature, o.seed);
  if (started) ids.erase(ids.begin());
  return decode(ids);
}

// A gpt checkpoint's model.
sequential checkpoint_model(const std::string& path, gpt_config& gpt) {
  const checkpoint_info info = read_checkpoint_info(path);
  if (!is_gpt_spec(info.state.model_spec))
    throw std::invalid_argument("--checkpoint " + path + " holds the model '" + info.state.model_spec +
                                "', not a gpt model: generate needs a checkpoint of `train --model gpt:...`");
  gpt = parse_gpt_spec(info.state.model_spec);
  sequential model = sequential::from_layer_specs(info.layer_specs);
  load_checkpoint(path, model, nullptr);
  return model;
}

// The model of GPT-2's weights, of the file's shape (Note [GPT-2 weight files]).
sequential gpt2_model(const std::string& path, gpt_config& gpt) {
  const gpt2_file_info info = read_gpt2_info(path);
  if (info.heads_from.empty())
    throw std::invalid_argument("--init-from " + path + ": the file does not say how many heads its attention has "
                                "(no n_head in its metadata or in a config.json beside it)");
  gpt = info.config;
  sequential model = sequential::from_layer_specs(gpt_layer_specs(gpt));
  load_gpt2_weights(path, model, gpt);
  return model;
}

void run_generate(const generate_options& o) {
  if (o.checkpoint.empty() == o.init_from.empty())
    throw std::invalid_argument("generate: give --checkpoint (of `train --model gpt:...`) or --init-from (GPT-2's "
                                "weights), one of them");
  gpt_config gpt;
  const sequential model = o.init_from.empty() ? checkpoint_model(o.checkpoint, gpt) : gpt2_model(o.init_from, gpt);
  const std::string source = o.init_from.empty() ? "--checkpoint " + o.checkpoint : "--init-from " + o.init_from;
  set_compute_threads(single_process_threads());
  if (o.tokenizer.empty() && o.vocab.empty()) {
    if (gpt.vocabulary != 256)
      throw std::invalid_argument(source + ": the model's vocabulary is " +
                                  std::to_string(gpt.vocabulary) +
                                  " tokens, not 256 bytes: give --tokenizer or --vocab and --merges to print its text");
    std::cout << generate_text(model, gpt.context, o.prompt, o.tokens, o.temperature, o.seed) << std::endl;
  } else {
    std::cout << generate_token_text(o, model, gpt) << std::endl;
  }
}

}  // namespace

void add_generate_command(CLI::App& app) {
  auto o = std::make_shared<generate_options>();
  auto* cmd = app.add_subcommand("generate", "sample text from a gpt checkpoint (of `train --model gpt:... --checkpoint "
                                             "PATH`) or from GPT-2's weights (--init-from)");
  auto* checkpoint = cmd->add_option("--checkpoint", o->checkpoint, "the checkpoint (safetensors)");
  cmd->add_option("--init-from", o->init_from,
                  "GPT-2's weights instead of a checkpoint: llm.c's gpt2_124M.bin or Hugging Face's model.safetensors")
      ->excludes(checkpoint);
  cmd->add_option("--prompt", o->prompt, "the text to continue (empty: start from a newline)");
  cmd->add_option("--tokens", o->tokens, "bytes (or tokens, with a tokenizer) to sample")->check(whole_number(0, 1 << 20))->capture_default_str();
  cmd->add_option("--temperature", o->temperature, "softmax temperature (0: always the likeliest byte)")
      ->check(real_number(0, true, 100))
      ->capture_default_str();
  cmd->add_option("--seed", o->seed, "sampling seed")->check(whole_number(0))->capture_default_str();
  auto* tokenizer = cmd->add_option("--tokenizer", o->tokenizer,
                                    "llm.c's tokenizer file: the model's tokens are decoded with it (no --prompt)");
  auto* vocab = cmd->add_option("--vocab", o->vocab, "GPT-2's vocab.json: the prompt encoded, the tokens decoded");
  auto* merges = cmd->add_option("--merges", o->merges, "GPT-2's merges.txt (with --vocab)");
  vocab->needs(merges);
  merges->needs(vocab);
  tokenizer->excludes(vocab)->excludes(merges);
  cmd->callback([o] { run_generate(*o); });
}

}  // namespace ap::cli

// `actorpipe generate`: samples text from a GPT checkpoint (written by any stage count: its parameters carry
// global names) and prints the prompt and the sampled bytes.
#include <iostream>
#include <memory>

#include "checkpoint/checkpoint.hpp"
#include "cli/checks.hpp"
#include "cli/commands.hpp"
#include "model/gpt_spec.hpp"
#include "model/text_generation.hpp"
#include "tensor/compute.hpp"

namespace ap::cli {
namespace {

struct generate_options {
  std::string checkpoint;
  std::string prompt;
  std::size_t tokens = 200;
  float temperature = 0.8f;
  std::uint64_t seed = 1;
};

void run_generate(const generate_options& o) {
  const checkpoint_info info = read_checkpoint_info(o.checkpoint);
  if (!is_gpt_spec(info.state.model_spec))
    throw std::invalid_argument("--checkpoint " + o.checkpoint + " holds the model '" + info.state.model_spec +
                                "', not a gpt model: generate needs a checkpoint of `train --model gpt:...`");
  const gpt_config gpt = parse_gpt_spec(info.state.model_spec);
  sequential model = sequential::from_layer_specs(info.layer_specs);
  load_checkpoint(o.checkpoint, model, nullptr);
  set_compute_threads(single_process_threads());
  std::cout << generate_text(model, gpt.context, o.prompt, o.tokens, o.temperature, o.seed) << std::endl;
}

}  // namespace

void add_generate_command(CLI::App& app) {
  auto o = std::make_shared<generate_options>();
  auto* cmd = app.add_subcommand("generate", "sample text from a gpt checkpoint (of `train --model gpt:... --checkpoint PATH`)");
  cmd->add_option("--checkpoint", o->checkpoint, "the checkpoint (safetensors)")->required();
  cmd->add_option("--prompt", o->prompt, "the text to continue (empty: start from a newline)");
  cmd->add_option("--tokens", o->tokens, "bytes to sample")->check(whole_number(0, 1 << 20))->capture_default_str();
  cmd->add_option("--temperature", o->temperature, "softmax temperature (0: always the likeliest byte)")
      ->check(real_number(0, true, 100))
      ->capture_default_str();
  cmd->add_option("--seed", o->seed, "sampling seed")->check(whole_number(0))->capture_default_str();
  cmd->callback([o] { run_generate(*o); });
}

}  // namespace ap::cli

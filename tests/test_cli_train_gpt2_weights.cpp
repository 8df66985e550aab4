// `actorpipe train --init-from` (GPT-2's weights, llm.c's or Hugging Face's, into every stage) and `--export-as`
// (the trained weights as GPT-2's), `generate --init-from`, and their refusals before any work.
#include <doctest/doctest.h>

#include <chrono>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "checkpoint/gpt2_weights.hpp"
#include "checkpoint/safetensors.hpp"
#include "model/sequential.hpp"
#include "node_process.hpp"
#include "cli_runs.hpp"
#include "test_support.hpp"

using namespace ap;
using namespace std::chrono_literals;

namespace {

// GPT-2's shape with an untied head (a plain gpt spec's) and byte tokens: trains on text, samples without a tokenizer.
const std::string spec = "gpt:layers=2,dim=64,heads=4,context=64,init=gpt2";

// `actorpipe ARGS...` to its end: its exit code, its first stdout line, its stderr.
struct run_output {
  int code = 0;
  std::string out, err;
};
run_output run(const std::vector<std::string>& args) {
  const test::program_run r = test::run_actorpipe(args);
  return {r.code, r.lines.empty() ? std::string() : r.lines.front(), r.err};
}

// GPT-2-shaped weights of `spec`, every parameter off its initial value, the head tied to wte when `tied` (a
// Linear head set to wte^T with a zero bias), written as `path`'s format.
void write_start(const std::string& path, bool tied) {
  sequential model = sequential::from_spec(spec, sequential_options{"relu", 11});
  std::uint64_t i = 0;
  for (const parameter& p : model.parameters()) *p.value += test::random_tensor(p.value->shape(), ++i, 0.1f);
  if (tied) {
    const std::vector<parameter> params = model.parameters();
    const tensor& wte = *params.front().value;
    const std::size_t V = wte.shape()[0], C = wte.shape()[1];
    for (const parameter& p : params) {
      if (p.name == "5.bias") p.value->fill(0.0f);
      if (p.name == "5.weight")
        for (std::size_t v = 0; v < V; ++v)
          for (std::size_t c = 0; c < C; ++c) p.value->data()[c * V + v] = wte.data()[v * C + c];
    }
  }
  write_gpt2_weights(path, gpt2_format_for_path(path), parse_gpt_spec(spec), model);
}

std::string bytes_of(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::string text_file(const test::scratch_dir& dir) {
  const std::string text = dir.file("text.txt");
  std::ofstream f(text);
  for (int i = 0; i < 1500; ++i) f << "the quick brown fox jumps over the lazy dog " << i << "\n";
  return text;
}

}  // namespace

TEST_CASE("train --init-from gpt2 weights reach both stages unchanged, fine-tunes, and --export-as writes them") {
  test::scratch_dir dir{"cli_gpt2_weights"};
  const std::string text = text_file(dir);
  const std::string start = dir.file("start.safetensors"), same = dir.file("same.safetensors");
  write_start(start, false);
  // No --model: the file's shape. SGD at 1e-30 leaves every weight as it was, so what comes out is what went in.
  const std::vector<std::string> still = {"--text", text, "--stages", "2", "--microbatches", "2", "--batch-size", "4",
                                          "--max-steps", "2", "--optimizer", "sgd", "--lr", "1e-30", "--threads", "1"};
  std::vector<std::string> args = {"train", "--init-from", start, "--export-as", same};
  args.insert(args.end(), still.begin(), still.end());
  run_output r = run(args);
  INFO(r.err);
  REQUIRE(r.code == 0);
  CHECK(test::contains(r.err, "init-from: --model gpt:layers=2,dim=64,heads=4,context=64,init=gpt2, the shape of " + start +
                                  " (heads from the metadata)"));
  CHECK(test::contains(r.err, "init-from: the weights of " + start + " (Hugging Face safetensors)"));
  CHECK(test::contains(r.err, "weights written to " + same + " as Hugging Face safetensors GPT-2 weights"));
  const safetensors_file in = read_safetensors(start), out = read_safetensors(same);
  REQUIRE(in.tensors.size() == out.tensors.size());
  for (const auto& [name, t] : in.tensors) CHECK_MESSAGE(out.tensors.at(name) == t, name);

  // llm.c's file in, into an untied --model: its head becomes the Linear head wte^T and a zero bias.
  const std::string bin = dir.file("start.bin"), from_bin = dir.file("from_bin.safetensors");
  write_start(bin, true);
  args = {"train", "--init-from", bin, "--model", spec, "--export-as", from_bin};
  args.insert(args.end(), still.begin(), still.end());
  r = run(args);
  INFO(r.err);
  REQUIRE(r.code == 0);
  CHECK(test::contains(r.err, "init-from: the weights of " + bin + " (llm.c)"));
  // The zero bias moved by 1e-30 x its gradient, so the file out has a head of its own: lm_head.weight, still wte.
  const gpt2_weights original = read_gpt2_weights(bin), again = read_gpt2_weights(from_bin);
  CHECK(original.info.tied);
  CHECK_FALSE(again.info.tied);
  REQUIRE(again.tensors.names.size() == original.tensors.names.size() + 1);  // and 5.bias
  for (std::size_t k = 0; k < original.tensors.names.size(); ++k) {
    REQUIRE(again.tensors.names[k] == original.tensors.names[k]);
    CHECK_MESSAGE(again.tensors.values[k] == original.tensors.values[k], original.tensors.names[k]);
  }

  // The same file into the file's own shape, tied (tied=1): what comes out is the very file that went in.
  const std::string same_bin = dir.file("same.bin");
  args = {"train", "--init-from", bin, "--export-as", same_bin};
  args.insert(args.end(), still.begin(), still.end());
  r = run(args);
  INFO(r.err);
  REQUIRE(r.code == 0);
  CHECK(test::contains(r.err, "init-from: --model gpt:layers=2,dim=64,heads=4,context=64,init=gpt2,tied=1, the shape of " +
                                  bin + " (heads from the header)"));
  CHECK(test::contains(r.err, "weights written to " + same_bin + " as llm.c GPT-2 weights"));
  CHECK(bytes_of(same_bin) == bytes_of(bin));

  // Fine-tuned for a few steps at a real lr: the loss falls from the file's, and the weights move.
  const std::string tuned = dir.file("tuned.bin"), log = dir.file("log.jsonl");
  r = run({"train", "--init-from", bin, "--model", "gpt2-tiny:vocab=256", "--text", text, "--batch-size", "8",
           "--max-steps", "6", "--optimizer", "adamw", "--lr", "3e-3", "--threads", "1", "--export-as", tuned, "--log", log});
  INFO(r.err);
  REQUIRE(r.code == 0);
  std::vector<double> losses;
  std::ifstream lines(log);
  for (std::string line; std::getline(lines, line);)
    if (const auto j = nlohmann::json::parse(line); j.contains("loss")) losses.push_back(j.at("loss").get<double>());
  REQUIRE(losses.size() == 6);
  CHECK(losses.back() < losses.front());
  const gpt2_weights moved = read_gpt2_weights(tuned);
  REQUIRE(moved.tensors.names.at(4) == "2.0.1.qkv.weight");
  CHECK_FALSE(moved.tensors.values.at(4) == original.tensors.values.at(4));

  // generate samples from it as from a checkpoint.
  r = run({"generate", "--init-from", tuned, "--prompt", "the ", "--tokens", "10", "--seed", "3"});
  INFO(r.err);
  CHECK(r.code == 0);
  CHECK(r.out.rfind("the ", 0) == 0);
}

TEST_CASE("train --init-from and --export-as of gpt2 weights: refusals name the flag and what is wrong, before any step") {
  test::scratch_dir dir{"cli_gpt2_refusals"};
  const std::string start = dir.file("start.safetensors");
  write_start(start, false);
  const auto refusal = [&](std::vector<std::string> args) {
    args.insert(args.begin(), "train");
    const run_output r = run(args);
    CHECK(r.code != 0);
    return r.err;
  };
  CHECK(test::contains(refusal({"--init-from", start, "--model", "gpt:layers=3,dim=128,heads=4,context=64,init=gpt2"}),
                       "--init-from " + start + ": the file holds gpt:layers=2,dim=64,heads=4,context=64,init=gpt2, another "
                                                "shape than --model gpt:layers=3,dim=128,heads=4,context=64,init=gpt2: "
                                                "layers 2 vs 3, dim 64 vs 128, mlp 256 vs 512 (the file's vs --model's)"));
  CHECK(test::contains(refusal({"--init-from", start, "--model", "784-10"}),
                       "--init-from " + start + " needs a gpt model of GPT-2's architecture"));
  CHECK(test::contains(refusal({"--init-from", start, "--resume", start}), "both set the weights"));
  CHECK(test::contains(refusal({"--init-from", dir.file("missing.bin")}), "no such file"));
  CHECK(test::contains(refusal({"--model", spec, "--export-as", dir.file("out.bin")}),
                       "llm.c's format holds no LM head of its own"));
  CHECK(test::contains(refusal({"--model", "gpt2-tiny:norm=rms", "--export-as", dir.file("out.safetensors")}),
                       "norm=rms: GPT-2 normalises with LayerNorm (norm=layer)"));
  CHECK(test::contains(refusal({"--model", spec, "--export-as", dir.file("out.pt")}), "must end in .bin"));
  CHECK(test::contains(run({"generate", "--prompt", "x"}).err, "give --checkpoint"));
}

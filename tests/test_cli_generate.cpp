// `actorpipe train --model gpt:...` on 2 stages writes a checkpoint that `actorpipe generate` samples from:
// the prompt leads, the seed fixes the text, and the JSON line reports the validation loss and tokens/s.
#include <doctest/doctest.h>

#include <chrono>
#include <fstream>
#include <string>

#include "node_process.hpp"
#include "cli_runs.hpp"
#include "test_support.hpp"

using namespace ap;
using namespace std::chrono_literals;

namespace {

// The first line of stdout of `actorpipe args...`, which must exit with 0.
std::string first_line(const std::vector<std::string>& args) {
  const test::program_run r = test::run_actorpipe(args);
  INFO(r.err);
  CHECK(r.code == 0);
  return r.lines.empty() ? std::string() : r.lines.front();
}

}  // namespace

TEST_CASE("generate samples from the checkpoint of a 2-stage gpt run") {
  test::scratch_dir dir{"cli_generate"};
  const std::string text = (dir.path / "text.txt").string(), checkpoint = (dir.path / "gpt.safetensors").string();
  {
    std::ofstream f(text);  // 56 KB: every tenth 4 KiB block is validation
    for (int i = 0; i < 1200; ++i) f << "the quick brown fox jumps over the lazy dog " << i << "\n";
  }
  const std::string json = first_line({"train", "--model", "gpt:layers=1,dim=16,heads=2,context=8", "--text", text,
                                       "--stages", "2", "--microbatches", "3", "--schedule", "1f1b", "--batch-size", "6",
                                       "--max-steps", "5", "--checkpoint", checkpoint});
  CHECK(test::contains(json, "\"validation_loss\":"));
  CHECK(test::contains(json, "\"bits_per_byte\":"));
  CHECK(test::contains(json, "\"tokens_per_s\":"));
  const std::vector<std::string> generate = {"generate", "--checkpoint", checkpoint, "--prompt", "the ", "--tokens", "12",
                                             "--seed", "3"};
  const std::string a = first_line(generate);
  CHECK(a.rfind("the ", 0) == 0);
  CHECK(first_line(generate) == a);
}

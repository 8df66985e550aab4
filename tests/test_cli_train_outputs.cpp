// What `actorpipe train` writes besides the model: the JSON line's loss keys, the loss curve (--plot), no
// progress line when stderr is not a terminal, --layers-per-chunk with commas and spaces, --timeline, the default split,
// bf16 on a processor without bf16 products.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli_runs.hpp"
#include "node_process.hpp"
#include "plan/memory_model.hpp"
#include "tensor/compute.hpp"
#include "tensor/matmul.hpp"
#include "test_support.hpp"
#include "training/trainer.hpp"

using namespace ap;
using namespace std::chrono_literals;
using test::actorpipe;

namespace {

// A train run that exits 0: its JSON line and what it printed on stderr.
struct train_run {
  nlohmann::json out;
  std::string err;
};
train_run run_train(const std::vector<std::string>& args) {
  const test::program_run r = test::run_program(args);
  return {test::result_of(r), r.err};
}

// A run that must fail: its stderr.
std::string refusal(const std::vector<std::string>& args) {
  const test::program_run r = test::run_actorpipe(args);
  INFO(r.err);
  CHECK(r.code != 0);
  CHECK(r.code != -1);
  return r.err;
}

}  // namespace

TEST_CASE("a 2-stage run with --layers-per-chunk '1, 4' and --plot: JSON loss keys, SVG curve, no progress on a pipe") {
  test::scratch_dir dir{"cli_train_outputs"};
  const std::string plot = dir.file("loss.svg"), timeline = dir.file("timeline.svg");
  const train_run run = run_train({actorpipe, "train", "--stages", "2", "--layers-per-chunk", "1, 4", "--train-limit",
                                   "256", "--batch-size", "64", "--epochs", "2", "--plot", plot, "--timeline", timeline});
  const nlohmann::json& out = run.out;
  const std::string& log = run.err;
  INFO(log);
  CHECK(out.at("layers_per_chunk") == nlohmann::json::array({1, 4}));
  CHECK(out.at("steps") == 8);
  CHECK(out.at("last_epoch_steps") == 4);
  CHECK(out.at("last_epoch_mean_loss").get<double>() > 0.0);
  CHECK(out.at("last_step_loss").get<double>() > 0.0);
  CHECK_FALSE(out.contains("final_loss"));
  // Per step: predicted and measured busy time per stage, and makespan; the timeline's last step.
  CHECK(out.at("busy_s").size() == 2);
  CHECK(out.at("predicted_busy_s").size() == 2);
  CHECK(out.at("makespan_s").get<double>() > 0.0);
  CHECK(out.at("predicted_makespan_s").get<double>() > 0.0);
  CHECK(out.at("timeline").at("step") == 7);
  CHECK(out.at("timeline").at("measured_makespan_s").get<double>() > 0.0);
  CHECK(out.at("timeline").at("simulated_makespan_s").get<double>() > 0.0);
  CHECK(test::contains(log, "timeline of step 7 written to " + timeline));
  std::ifstream tl(timeline);
  std::stringstream tl_svg;
  tl_svg << tl.rdbuf();
  CHECK(test::contains(tl_svg.str(), "measured, step 7: makespan"));
  CHECK(log.find('\r') == std::string::npos);  // stderr is a pipe here: epoch lines only
  CHECK(test::contains(log, "loss curve written to " + plot));
  std::ifstream in(plot);
  std::stringstream svg;
  svg << in.rdbuf();
  CHECK(svg.str().rfind("<svg", 0) == 0);
  CHECK(test::contains(svg.str(), "class=\"steps\""));
  CHECK(test::contains(svg.str(), "<circle"));  // the two epoch means
}

TEST_CASE("--recompute blocks on two nodes: the run without it, bit for bit, with smaller stashes, bad modes refused") {
  // The mode travels to the nodes in the stage spec (Note [recomputation]).
  test::node_process first(actorpipe, {"--insecure"}), second(actorpipe, {"--insecure"});
  const auto run = [&](const std::string& mode) {
    return run_train({actorpipe, "train", "--model", "gpt:layers=2,dim=32,heads=2,context=16", "--stages", "2",
                      "--microbatches", "4", "--batch-size", "16", "--max-steps", "4", "--recompute", mode, "--nodes",
                      first.address() + "," + second.address(), "--insecure"})
        .out;
  };
  const auto kept = run("none"), recomputed = run("blocks");
  CHECK(kept.at("recompute") == "none");
  CHECK(recomputed.at("recompute") == "blocks");
  CHECK(recomputed.at("last_step_loss").get<double>() == kept.at("last_step_loss").get<double>());
  for (int s = 0; s < 2; ++s) {
    CAPTURE(s);
    CHECK(recomputed.at("peak_stash_bytes").at(s).get<std::uint64_t>() <
          kept.at("peak_stash_bytes").at(s).get<std::uint64_t>());
  }
  CHECK(test::contains(refusal({"train", "--recompute", "layers"}), "--recompute"));
  const std::string sync = refusal({"train", "--model", "gpt:layers=2,dim=32,heads=2,context=16", "--stages", "2",
                                    "--schedule", "sync-backward", "--recompute", "blocks", "--max-steps", "1"});
  CHECK(test::contains(sync, "recomputing blocks keep none"));
  CHECK_FALSE(test::contains(sync, "step 0"));  // refused before any step
}

TEST_CASE("--sequence-lengths trains a gpt on mixed lengths, counts its tokens, and refuses what cannot fit") {
  // Step s trains batch-size x L_s positions, L_s = sequence_length_of(lengths, seed, s) (Note [sequence lengths]).
  const std::vector<std::size_t> lengths = {4, 16};
  const train_run run = run_train({actorpipe, "train", "--model", "gpt:layers=1,dim=16,heads=2,context=16", "--stages",
                                   "2", "--microbatches", "2", "--batch-size", "8", "--max-steps", "6", "--seed", "3",
                                   "--sequence-lengths", "4,16"});
  const nlohmann::json& out = run.out;
  INFO(run.err);
  CHECK(out.at("steps") == 6);
  std::size_t positions = 0;
  std::set<std::size_t> used;
  for (std::uint64_t step = 0; step < 6; ++step) {
    used.insert(sequence_length_of(lengths, 3, step));
    positions += 8 * sequence_length_of(lengths, 3, step);
  }
  REQUIRE(used.size() == 2);  // both lengths among these steps: mixed
  // Tokens are the positions trained on, over the run's wall time.
  const double tokens = out.at("tokens_per_s").get<double>() * out.at("wall_s").get<double>();
  CHECK(tokens == doctest::Approx(static_cast<double>(positions)).epsilon(1e-9));
  CHECK(test::contains(refusal({"train", "--model", "gpt:layers=1,dim=16,heads=2,context=16", "--sequence-lengths", "8,32"}),
                       "--sequence-lengths 32 is longer than the model's 16 positions"));
  CHECK(test::contains(refusal({"train", "--sequence-lengths", "8"}), "--sequence-lengths needs a gpt model"));
}

TEST_CASE("--sequence-lengths after --resume: the resumed steps take the lengths of an uninterrupted run's") {
  // The length is chosen from (--seed, step), the step counted from the run's start, so the run resumed at step 3
  // trains steps 3-5 on the uninterrupted run's lengths and ends with its loss (Note [sequence lengths]).
  test::scratch_dir dir{"cli_sequence_resume"};
  const std::vector<std::size_t> lengths = {4, 16};
  std::multiset<std::size_t> first, last;
  for (std::uint64_t step = 0; step < 3; ++step) first.insert(sequence_length_of(lengths, 3, step));
  for (std::uint64_t step = 3; step < 6; ++step) last.insert(sequence_length_of(lengths, 3, step));
  REQUIRE(first != last);  // a resumed run that chose from its own step count would train other lengths
  const auto train = [&](std::vector<std::string> more) {
    std::vector<std::string> args = {actorpipe, "train", "--model", "gpt:layers=1,dim=16,heads=2,context=16", "--stages",
                                     "2", "--microbatches", "2", "--batch-size", "8", "--seed", "3",
                                     "--sequence-lengths", "4,16"};
    args.insert(args.end(), more.begin(), more.end());
    return run_train(args).out;
  };
  const nlohmann::json whole = train({"--max-steps", "6"});
  const std::string checkpoint = dir.file("half.safetensors");
  train({"--max-steps", "3", "--checkpoint", checkpoint});
  const nlohmann::json resumed = train({"--max-steps", "6", "--resume", checkpoint});
  CHECK(resumed.at("last_step_loss").get<double>() == whole.at("last_step_loss").get<double>());
  std::size_t positions = 0;
  for (std::size_t L : last) positions += 8 * L;
  const double tokens = resumed.at("tokens_per_s").get<double>() * resumed.at("wall_s").get<double>();
  CHECK(tokens == doctest::Approx(static_cast<double>(positions)).epsilon(1e-9));
}

TEST_CASE("the memory model predicts each stage's peak stash within 10% of the measured, and --max-memory refuses") {
  // GPipe holds every microbatch, 1F1B p - s of them, interleaved chunks of unequal stashes,
  // ZB-H1 a microbatch's dy's between its I and its W;
  // an MLP and a GPT (Note [memory model]).
  struct run_case {
    std::vector<std::string> args;
  };
  const std::vector<run_case> cases = {
      {{"--model", "784-256-128-10", "--schedule", "gpipe", "--train-limit", "512"}},
      {{"--model", "784-256-128-10", "--schedule", "1f1b", "--train-limit", "512"}},
      {{"--model", "gpt:layers=2,dim=32,heads=2,context=16", "--schedule", "1f1b"}},
      {{"--model", "gpt:layers=2,dim=32,heads=2,context=16", "--schedule", "1f1b", "--recompute", "blocks"}},
      {{"--model", "gpt:layers=2,dim=32,heads=2,context=16", "--schedule", "interleaved", "--chunks", "2"}},
      {{"--model", "gpt:layers=2,dim=32,heads=2,context=16", "--schedule", "zb-h1"}},
      // Each rank's own layers, chunk by chunk (stage 0's first Linear has no partner in its chunk and stays whole on
      // both ranks); exact, as without tensor parallelism (Note [tensor-parallel memory]).
      {{"--model", "784-256-128-10", "--schedule", "gpipe", "--train-limit", "512", "--tensor-parallel", "2"}},
      {{"--model", "gpt:layers=2,dim=32,heads=2,context=16", "--schedule", "zb-h1", "--tensor-parallel", "2"}},
  };
  for (const run_case& c : cases) {
    std::vector<std::string> args = {actorpipe, "train", "--stages", "2", "--microbatches", "4", "--batch-size", "32",
                                      "--max-steps", "3"};
    args.insert(args.end(), c.args.begin(), c.args.end());
    CAPTURE(c.args[1]);
    CAPTURE(c.args[3]);
    const train_run run = run_train(args);
    const nlohmann::json& out = run.out;
    const std::string& err = run.err;
    INFO(err);
    CHECK(test::contains(err, "stage 1: predicted memory"));
    for (int s = 0; s < 2; ++s) {
      CAPTURE(s);
      const double predicted = out.at("predicted_peak_stash_bytes").at(s).get<double>();
      const double measured = out.at("peak_stash_bytes").at(s).get<double>();
      CHECK(measured > 0.0);
      CHECK(std::abs(predicted - measured) <= 0.1 * measured);
    }
    if (std::find(c.args.begin(), c.args.end(), "--tensor-parallel") != c.args.end())
      CHECK(test::contains(err, " for its 2 tensor-parallel ranks, each (weights "));
  }
  const std::string tight = refusal({"train", "--stages", "2", "--model", "784-256-128-10", "--max-memory", "1M"});
  CHECK(test::contains(tight, "this process needs about"));
  CHECK(test::contains(tight, "over --max-memory 1.0 MB: stage 0 "));
  CHECK_FALSE(test::contains(tight, "epoch"));  // refused before any step
  // Without stages, the process holds the model once per replica (Note [memory budget]).
  const std::string single = refusal({"train", "--model", "784-256-128-10", "--data-parallel", "2", "--max-memory", "1M",
                                      "--train-limit", "512"});
  CHECK(test::contains(single, "memory: predicted "));
  CHECK(test::contains(single, " for 2 replicas of the model"));
  CHECK(test::contains(single, "this process needs about"));
  CHECK_FALSE(test::contains(single, "epoch"));
  run_train({actorpipe, "train", "--model", "784-256-128-10", "--max-memory", "1G", "--train-limit", "256", "--max-steps", "1"});
  // With tensor-parallel ranks too (each rank's own weights and stash).
  CHECK(test::contains(refusal({"train", "--model", "784-256-128-10", "--stages", "2", "--tensor-parallel", "2",
                                "--max-memory", "1M", "--train-limit", "256"}),
                       "this process needs about"));
  run_train({actorpipe, "train", "--model", "784-256-128-10", "--tensor-parallel", "2", "--max-memory", "1G",
             "--train-limit", "256", "--max-steps", "1"});
  CHECK(test::contains(refusal({"train", "--stages", "2", "--max-memory", "lots"}), "memory size 'lots'"));
}

TEST_CASE("the memory model predicts what building and training a pipeline add to the process's tensors") {
  // Every stage's weights, gradients, optimizer state, stash and workspace (D replicas of
  // each, each stage's T ranks), against the tensors' peak (Note [tensor bytes], Note [memory model]).
  // The prediction adds every stage's own peak; the stages reach theirs at different moments, so the process
  // may stay below it (ZB-H1 and interleaved chunks ~0.85), and the tensors in flight between actors come on top.
  const std::vector<std::vector<std::string>> cases = {
      {"--model", "784-512-512-10", "--batch-size", "256", "--train-limit", "1024", "--schedule", "gpipe"},
      {"--model", "784-512-512-10", "--batch-size", "256", "--train-limit", "1024", "--data-parallel", "2"},
      {"--model", "784-512-512-10", "--batch-size", "256", "--train-limit", "1024", "--tensor-parallel", "2"},
      {"--model", "gpt:layers=2,dim=64,heads=4,context=32", "--batch-size", "32", "--schedule", "1f1b"},
      {"--model", "gpt:layers=2,dim=64,heads=4,context=32", "--batch-size", "32", "--schedule", "zb-h1"},
  };
  // The run measures where this kernel lets a process reset its resident peak (/proc/self/clear_refs), as here.
  const bool measured = reset_peak_resident_memory();
  for (const auto& c : cases) {
    std::vector<std::string> args = {actorpipe, "train", "--stages", "2", "--microbatches", "4", "--max-steps", "3"};
    args.insert(args.end(), c.begin(), c.end());
    CAPTURE(c[1]);
    CAPTURE(c[c.size() - 1]);
    const train_run run = run_train(args);
    const nlohmann::json& out = run.out;
    const std::string& err = run.err;
    INFO(err);
    CHECK(test::contains(err, "memory: predicted "));
    if (!measured) {
      CHECK_FALSE(out.contains("tensor_peak_growth_bytes"));
      continue;
    }
    REQUIRE(out.contains("tensor_peak_growth_bytes"));
    const double predicted = out.at("predicted_process_growth_bytes").get<double>();
    const double tensors = out.at("tensor_peak_growth_bytes").get<double>();
    CHECK(tensors >= 0.75 * predicted);
    CHECK(tensors <= 1.15 * predicted);
  }
}

TEST_CASE("train splits by parameters unless told (Note [default partition]): a GPT's blocks evenly, uniform on request") {
  const auto split = [](const std::vector<std::string>& extra) {
    std::vector<std::string> args{actorpipe, "train", "--model", "gpt:layers=6,dim=32,heads=2,context=16", "--stages", "4",
                                  "--max-steps", "1", "--batch-size", "8", "--validation-windows", "4"};
    args.insert(args.end(), extra.begin(), extra.end());
    const nlohmann::json out = run_train(args).out;
    return std::make_pair(out.at("partition").get<std::string>(), out.at("layers_per_chunk"));
  };
  // 10 layers: token and position embeddings, 6 blocks, layer norm, head. By parameters: 1 block with the
  // embeddings, 2, 2, 1 with the head; uniform counts the embeddings and the head as blocks: 3, 3, 2, 2 layers.
  const auto by_default = split({});
  CHECK(by_default.first == "params");
  CHECK(by_default.second == nlohmann::json::array({3, 2, 2, 3}));
  const auto uniform = split({"--partition", "uniform"});
  CHECK(uniform.first == "uniform");
  CHECK(uniform.second == nlohmann::json::array({3, 3, 2, 2}));
}

TEST_CASE("train --dtype bf16 trains on any processor and says where oneDNN makes no bf16 products (no AVX-512)") {
  // Note [bf16 without AVX-512] in tensor/matmul_onednn.cpp: the line on this machine's kind of processor only.
  const std::string no_bf16 = "this machine's processor has no AVX-512";
  const train_run bf16 = run_train({actorpipe, "train", "--dtype", "bf16", "--stages", "2", "--train-limit", "256",
                                    "--batch-size", "64", "--epochs", "1"});
  INFO(bf16.err);
  CHECK(bf16.out.at("dtype") == "bfloat16");
  CHECK(std::isfinite(bf16.out.at("last_step_loss").get<double>()));
  // The child's backend is this process's: the same build and environment (AP_COMPUTE).
  CHECK(test::contains(bf16.err, no_bf16) == (current_compute_backend() == compute_backend::onednn && !onednn_avx512()));
  const train_run fp32 = run_train({actorpipe, "train", "--train-limit", "256", "--batch-size", "64", "--epochs", "1"});
  CHECK_FALSE(test::contains(fp32.err, no_bf16));
}

// Data a user brings, through the engine: a uint16 token file (raw, and llm.c's) of a text trains the GPT to the text's
// losses; Fashion-MNIST as .npy trains exactly as through IDX; bad files are refused by `train` before any step.
#include <doctest/doctest.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/fashion_mnist.hpp"
#include "data/text_corpus.hpp"
#include "engine/engine.hpp"
#include "data_files.hpp"
#include "node_process.hpp"
#include "cli_runs.hpp"
#include "test_support.hpp"

using namespace ap;
using namespace std::chrono_literals;

namespace {

using test::actorpipe;

// llm.c's .bin: 256 int32 (magic 20240520, version 1, token count), then the uint16 tokens.
void write_llmc_tokens(const std::string& path, const std::vector<std::uint8_t>& bytes) {
  std::vector<std::int32_t> header(256, 0);
  header[0] = 20240520, header[1] = 1, header[2] = static_cast<std::int32_t>(bytes.size());
  std::vector<std::uint16_t> tokens(bytes.begin(), bytes.end());
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(header.data()), 256 * 4);
  out.write(reinterpret_cast<const char*>(tokens.data()), static_cast<std::streamsize>(tokens.size() * 2));
}

// np.save of a float32 (rows, cols) or int64 (rows) array: the 1.0 header padded to 64 bytes.
void write_npy(const std::string& path, const std::string& descr, const std::string& shape, const void* data,
               std::size_t bytes) {
  std::string header = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::ofstream out(path, std::ios::binary);
  out.write("\x93NUMPY\x01\x00", 8);
  const std::uint16_t length = static_cast<std::uint16_t>(header.size());
  out.write(reinterpret_cast<const char*>(&length), 2);
  out << header;
  out.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
}

void write_npy_pair(const dataset& d, std::size_t rows, const std::string& features, const std::string& labels) {
  const std::size_t cols = d.inputs.size() / d.size();
  write_npy(features, "<f4", "(" + std::to_string(rows) + ", " + std::to_string(cols) + ")", d.inputs.data(),
            rows * cols * 4);
  std::vector<std::int64_t> ids(rows);
  for (std::size_t i = 0; i < rows; ++i) ids[i] = static_cast<std::int64_t>(d.labels.data()[i]);
  write_npy(labels, "<i8", "(" + std::to_string(rows) + ",)", ids.data(), rows * 8);
}

run_config gpt_run() {
  run_config c;
  c.model = "gpt:layers=1,dim=16,heads=2,context=16";
  c.train.batch_size = 8;
  c.train.max_steps = 6;
  c.threads = 1;
  c.validation_windows = 16;
  return c;
}

void check_same(const run_result& a, const run_result& b) {
  CHECK(a.training.last_loss == b.training.last_loss);
  CHECK(a.training.final_loss == b.training.final_loss);
  REQUIRE(a.validation_loss.has_value());
  REQUIRE(b.validation_loss.has_value());
  CHECK(*a.validation_loss == *b.validation_loss);
}

}  // namespace

TEST_CASE("a uint16 token file and an llm.c file of a text's bytes train the GPT to the text's losses") {
  test::scratch_dir dir("engine_tokens");
  const text_corpus corpus = load_text_corpus(default_text_path);
  test::write_tokens<std::uint16_t>(dir.file("train.bin"), corpus.train);
  test::write_tokens<std::uint16_t>(dir.file("val.bin"), corpus.validation);
  write_llmc_tokens(dir.file("train_llmc.bin"), corpus.train);
  write_llmc_tokens(dir.file("val_llmc.bin"), corpus.validation);

  const run_result text = engine(gpt_run()).run();
  run_config raw = gpt_run();
  raw.data.path = dir.file("train.bin");
  raw.data.validation = dir.file("val.bin");
  const run_result tokens = engine(raw).run();
  check_same(tokens, text);
  run_config llmc = gpt_run();
  llmc.data.path = dir.file("train_llmc.bin");
  llmc.data.validation = dir.file("val_llmc.bin");
  const run_result from_llmc = engine(llmc).run();
  check_same(from_llmc, text);
  // The same on a 2-stage pipeline: the windows reach the stages as the text's do.
  run_config piped = raw;
  piped.stages = 2, piped.pipe.microbatches = 2;
  run_config piped_text = gpt_run();
  piped_text.stages = 2, piped_text.pipe.microbatches = 2;
  check_same(engine(piped).run(), engine(piped_text).run());
}

TEST_CASE("Fashion-MNIST written as .npy trains exactly as through IDX") {
  test::scratch_dir dir("engine_npy");
  const dataset train = load_fashion_mnist("train"), test = load_fashion_mnist("test");
  write_npy_pair(train, 512, dir.file("x.npy"), dir.file("y.npy"));
  write_npy_pair(test, test.size(), dir.file("xt.npy"), dir.file("yt.npy"));
  run_config idx;
  idx.model = "784-32-10";
  idx.data.limit = 512;
  idx.train.batch_size = 64;
  idx.train.epochs = 2;
  idx.threads = 1;
  run_config npy = idx;
  npy.data.path = dir.file("x.npy"), npy.data.labels = dir.file("y.npy");
  npy.data.validation = dir.file("xt.npy"), npy.data.validation_labels = dir.file("yt.npy");
  const run_result a = engine(idx).run(), b = engine(npy).run();
  CHECK(a.training.steps == 16);
  CHECK(b.training.last_loss == a.training.last_loss);
  CHECK(b.training.epoch_losses == a.training.epoch_losses);
  CHECK(b.training.test_accuracy == a.training.test_accuracy);
}

TEST_CASE("train refuses bad data before any step, naming the file and the place") {
  test::scratch_dir dir("engine_bad_data");
  const auto refusal = [&](std::vector<std::string> args) {
    args.insert(args.begin(), {"train", "--max-steps", "2", "--threads", "1", "--batch-size", "4"});
    const test::program_run p = test::run_actorpipe(args);
    CHECK(p.lines.empty());  // no JSON line: nothing trained
    CHECK(p.code != 0);
    CHECK(p.code != -1);
    CHECK_FALSE(test::contains(p.err, "epoch"));
    return p.err;
  };
  const std::string gpt = "gpt:layers=1,dim=16,heads=2,context=8";
  // A token id at or above the vocabulary: its index and value.
  test::write_tokens<std::uint16_t>(dir.file("big.bin"), std::vector<std::uint8_t>(100, 7));
  {
    std::fstream f(dir.file("big.bin"), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(2 * 40);
    const std::uint16_t id = 300;
    f.write(reinterpret_cast<const char*>(&id), 2);
  }
  const std::string vocab = refusal({"--model", gpt, "--data", dir.file("big.bin")});
  CHECK(test::contains(vocab, dir.file("big.bin")));
  CHECK(test::contains(vocab, "300"));
  // llm.c's header with a wrong magic.
  write_llmc_tokens(dir.file("bad_magic.bin"), std::vector<std::uint8_t>(100, 1));
  {
    std::fstream f(dir.file("bad_magic.bin"), std::ios::in | std::ios::out | std::ios::binary);
    const std::int32_t magic = 20240521;
    f.write(reinterpret_cast<const char*>(&magic), 4);
  }
  CHECK(test::contains(refusal({"--model", gpt, "--data", dir.file("bad_magic.bin"), "--data-format", "llmc"}),
                       dir.file("bad_magic.bin")));
  // A CSV row with a non-numeric field: its line and column.
  std::ofstream(dir.file("rows.csv")) << "a,b,label\n1,2,0\n3,x,1\n";
  const std::string csv = refusal({"--model", "2-4-2", "--data", dir.file("rows.csv")});
  CHECK(test::contains(csv, "rows.csv"));
  CHECK(test::contains(csv, "line 3"));
  // An unknown config key, with the file's line.
  std::ofstream(dir.file("run.json")) << "{\n  \"model\": \"784-10\",\n  \"learning-rate\": 0.1\n}\n";
  const std::string key = refusal({"--config", dir.file("run.json")});
  CHECK(test::contains(key, "run.json:3: unknown key 'learning-rate'"));
}

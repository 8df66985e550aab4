// Training through data sources: a tiny GPT on a uint16 token file trains exactly as on the text path, the
// dataset overloads equal the source ones, a resume takes the same batches, and no test set means no accuracy.
#include <doctest/doctest.h>

#include <fstream>

#include "data/open_data.hpp"
#include "data/text_corpus.hpp"
#include "data/token_windows.hpp"
#include "test_support.hpp"
#include "training/trainer.hpp"

using namespace ap;

namespace {

optimizer_config adam() {
  optimizer_config o;
  o.kind = "adam";
  o.lr = 0.01f;
  return o;
}

const char* const tiny_gpt = "gpt:layers=1,dim=16,heads=2,context=8";

std::vector<double> losses_of(const data_source& train_set, const data_source* test_set, train_config config,
                              double* accuracy = nullptr) {
  sequential model = sequential::from_spec(tiny_gpt, sequential_options{"relu", 7});
  local_runner runner(model, adam());
  std::vector<double> losses;
  config.on_step = [&](const step_progress& p) { losses.push_back(p.loss); };
  const train_report r = train(runner, train_set, test_set, config);
  if (accuracy) *accuracy = r.test_accuracy;
  return losses;
}

}  // namespace

TEST_CASE("a tiny GPT trains on a uint16 token file exactly as on the text it holds") {
  test::scratch_dir dir("train_tokens");
  std::string text;
  for (int i = 0; text.size() < 45000; ++i) text += "fortune " + std::to_string(i * 53 % 997) + " favours the bold\n";
  const std::string text_file = dir.file("text.txt");
  std::ofstream(text_file, std::ios::binary) << text;
  const text_corpus corpus = load_text_corpus(text_file);
  for (const auto& [name, part] : {std::pair{"train.bin", &corpus.train}, std::pair{"val.bin", &corpus.validation}}) {
    const std::vector<std::uint16_t> tokens(part->begin(), part->end());
    std::ofstream(dir.file(name), std::ios::binary)
        .write(reinterpret_cast<const char*>(tokens.data()), std::streamsize(tokens.size() * 2));
  }
  data_config as_text;
  as_text.path = text_file;
  data_config as_tokens;
  as_tokens.path = dir.file("train.bin");
  as_tokens.validation = dir.file("val.bin");
  const data_sets t = open_data(as_text, 8, 256, 3, 20), k = open_data(as_tokens, 8, 256, 3, 20);
  train_config config;
  config.batch_size = 16;
  config.max_steps = 12;
  config.seed = 5;
  double text_accuracy = 0, token_accuracy = 0;
  const auto text_losses = losses_of(*t.train, t.validation.get(), config, &text_accuracy);
  const auto token_losses = losses_of(*k.train, k.validation.get(), config, &token_accuracy);
  REQUIRE(text_losses.size() == 12);
  CHECK(text_losses == token_losses);
  CHECK(text_accuracy == token_accuracy);
  CHECK(text_accuracy > 0.0);
  CHECK(text_losses.back() < text_losses.front());  // it learns
}

TEST_CASE("the dataset overloads train and evaluate as their memory sources do") {
  std::vector<std::uint8_t> bytes(3000);
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = std::uint8_t("abcdefgh"[i % 8] + (i / 64) % 3);
  const dataset train_set = text_windows(bytes, 8, 100, 1, "train");
  const dataset test_set = text_windows_in_order(bytes, 8, 30, "test");
  train_config config;
  config.batch_size = 16;
  config.epochs = 2;
  sequential a = sequential::from_spec(tiny_gpt, sequential_options{"relu", 7});
  local_runner ra(a, adam());
  const train_report from_datasets = train(ra, train_set, test_set, config);
  const auto train_source = memory_source(train_set), test_source = memory_source(test_set);
  sequential b = sequential::from_spec(tiny_gpt, sequential_options{"relu", 7});
  local_runner rb(b, adam());
  const train_report from_sources = train(rb, *train_source, test_source.get(), config);
  CHECK(from_datasets.epoch_losses == from_sources.epoch_losses);
  CHECK(from_datasets.test_accuracy == from_sources.test_accuracy);
  CHECK(evaluate_loss(ra, test_set, 7) == evaluate_loss(rb, *test_source, 7));
  CHECK(evaluate_accuracy(ra, test_set, 7) == evaluate_accuracy(rb, *test_source, 7));
  // No test set: no final accuracy.
  sequential c = sequential::from_spec(tiny_gpt, sequential_options{"relu", 7});
  local_runner rc(c, adam());
  CHECK(train(rc, *train_source, nullptr, config).test_accuracy == 0.0);
}

TEST_CASE("a resumed run on a windows source takes the same batches as the uninterrupted one") {
  std::vector<std::uint8_t> bytes(4000);
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = std::uint8_t(97 + (i * i) % 23);
  const auto source = token_windows(token_span{bytes.data(), bytes.size(), 1, nullptr}, 8, 50, 9, 256, "bytes");
  train_config config;
  config.batch_size = 8;
  config.epochs = 3;  // 7 batches an epoch
  const auto whole = losses_of(*source, nullptr, config);
  REQUIRE(whole.size() == 21);

  sequential model = sequential::from_spec(tiny_gpt, sequential_options{"relu", 7});
  local_runner runner(model, adam());
  std::vector<double> parts;
  train_config first = config;
  first.max_steps = 10;
  first.on_step = [&](const step_progress& p) { parts.push_back(p.loss); };
  training_state at;
  first.checkpoint = [&](const training_state& s) { at = s; };
  train(runner, *source, nullptr, first);
  REQUIRE(at.step == 10);
  train_config rest = config;
  rest.start_step = at.step, rest.start_epoch = at.epoch, rest.start_batch = at.batch_in_epoch;
  rest.on_step = first.on_step;
  train(runner, *source, nullptr, rest);
  CHECK(parts == whole);
}

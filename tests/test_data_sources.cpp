// The data source interface: the lazy epoch order against epoch_order, in-memory sources against make_batch,
// token windows the same over bytes, uint16 and uint32 tokens, and the text path equal to a token file of its bytes.
#include <doctest/doctest.h>

#include <algorithm>
#include <fstream>
#include <set>

#include "data/data_source.hpp"
#include "data/open_data.hpp"
#include "data/text_corpus.hpp"
#include "data/token_file.hpp"
#include "data/token_windows.hpp"
#include "data_files.hpp"
#include "test_support.hpp"

using namespace ap;
using ap::test::contains;
using ap::test::error_of;

namespace {

dataset counting(std::size_t n) {
  dataset d;
  d.name = "counting";
  d.num_classes = 3;
  d.inputs = tensor::from_shape({n, 2});
  d.labels = tensor::from_shape({n});
  for (std::size_t i = 0; i < n; ++i) {
    d.inputs(i, 0) = float(i);
    d.inputs(i, 1) = float(10 * i);
    d.labels(i) = float(i % 3);
  }
  return d;
}

}  // namespace

TEST_CASE("the lazy order equals epoch_order element by element and is a permutation for many sizes") {
  for (std::size_t n : {0, 1, 2, 3, 5, 16, 17, 1000, 4097, 60000}) {
    const auto vector_order = epoch_order(n, 9, 4);
    const sample_order lazy(n, 9, 4);
    REQUIRE(lazy.size() == n);
    std::vector<char> seen(n, 0);
    for (std::size_t i = 0; i < n; ++i) {
      REQUIRE(lazy[i] == vector_order[i]);
      REQUIRE(lazy[i] < n);
      seen[lazy[i]] = 1;
    }
    CHECK(std::count(seen.begin(), seen.end(), 1) == std::ptrdiff_t(n));
  }
  // A size far beyond memory: positions map to distinct samples in range, and no vector is built.
  const std::size_t huge = std::size_t{1} << 40;
  const sample_order big(huge + 7, 1, 0);
  std::set<std::size_t> values;
  for (std::size_t i = 0; i < 1000; ++i) values.insert(big[i]);
  CHECK(values.size() == 1000);
  CHECK(*values.rbegin() < huge + 7);
  CHECK(*values.rbegin() > huge / 2);  // spread over the range, not the first thousand
  CHECK_THROWS_AS(big[huge + 7], std::out_of_range);
}

TEST_CASE("a memory source gathers the rows make_batch gives, and first_samples cuts it") {
  const auto source = memory_source(counting(10));
  CHECK(source->size() == 10);
  CHECK(source->num_classes() == 3);
  CHECK(source->sample_shape() == shape_t{2});
  CHECK(!source->is_sequence());
  const dataset d = counting(10);
  const auto order = epoch_order(10, 7, 3);
  const sample_order lazy(10, 7, 3);
  for (std::size_t b = 0; b < batch_count(10, 4); ++b) {
    const batch x = make_batch(d, order, b, 4), y = gather_batch(*source, lazy, b, 4);
    CHECK(x.inputs == y.inputs);
    CHECK(x.labels == y.labels);
  }
  CHECK_THROWS_AS(gather_batch(*source, lazy, 3, 4), std::out_of_range);
  const auto first = first_samples(source, 4);
  CHECK(first->size() == 4);
  const std::size_t bad = 5;
  CHECK(contains(error_of([&] { first->gather(&bad, 1); }), "first 4 samples of 'counting'"));
}

TEST_CASE("token windows: labels are the next tokens, starts depend on (seed, i) alone, the same for every width") {
  test::scratch_dir dir("sources");
  std::vector<std::uint8_t> bytes(5000);
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = std::uint8_t((i * 7 + i / 13) % 256);
  const token_span u8{bytes.data(), bytes.size(), 1, nullptr};
  const auto a = token_windows(u8, 8, 300, 5, 256, "bytes");
  CHECK(a->is_sequence());
  CHECK(a->sample_shape() == shape_t{8});
  CHECK(a->num_classes() == 256);
  const token_span u16 = open_token_file(test::write_tokens<std::uint16_t>(dir.file("t.u16"), bytes), token_file_kind::raw, 2, 256);
  const token_span u32 = open_token_file(test::write_tokens<std::uint32_t>(dir.file("t.u32"), bytes), token_file_kind::raw, 4, 256);
  CHECK(test::same_batches(*a, *token_windows(u16, 8, 300, 5, 256, "u16"), 3, 32));
  CHECK(test::same_batches(*a, *token_windows(u32, 8, 300, 5, 256, "u32"), 3, 32));
  CHECK(!test::same_batches(*a, *token_windows(u8, 8, 300, 6, 256, "other seed"), 3, 32));
  // Window i is the same whatever the count: no drawn vector of starts.
  const auto more = token_windows(u8, 8, 100000, 5, 256, "bytes");
  const std::size_t i = 123;
  CHECK(a->gather(&i, 1).inputs == more->gather(&i, 1).inputs);
  const dataset d = materialise(*a);
  for (std::size_t w = 0; w < d.size(); ++w) {
    const std::size_t start = window_start(5, w, bytes.size(), 8);
    REQUIRE(start + 8 < bytes.size());
    for (std::size_t p = 0; p < 8; ++p) {
      REQUIRE(d.inputs(w, p) == float(bytes[start + p]));
      REQUIRE(d.labels(w, p) == float(bytes[start + p + 1]));
    }
  }
  const auto in_order = token_windows_in_order(u16, 8, 1000000, 256, "validation");
  CHECK(in_order->size() == (bytes.size() - 1) / 8);
  CHECK(materialise(*in_order).inputs(2, 0) == float(bytes[16]));
  CHECK(contains(error_of([&] { token_windows(u8.part(0, 8), 8, 1, 1, 256, "short"); }),
                 "short: 8 tokens cannot fill a window of context 8 + 1"));
}

TEST_CASE("a uint16 token file of a text's bytes gives the text path's batches, training and validation") {
  test::scratch_dir dir("text_tokens");
  std::string text;
  for (int i = 0; text.size() < 60000; ++i) text += "line " + std::to_string(i * 37 % 1001) + ": the quick brown fox\n";
  const std::string text_file = dir.file("corpus.txt");
  std::ofstream(text_file, std::ios::binary) << text;
  const text_corpus corpus = load_text_corpus(text_file);
  const std::string train_file = test::write_tokens<std::uint16_t>(dir.file("train.bin"), corpus.train);
  const std::string val_file = test::write_tokens<std::uint16_t>(dir.file("val.bin"), corpus.validation);

  data_config as_text;
  as_text.path = text_file;
  const data_sets t = open_data(as_text, 8, 256, 11, 50);
  data_config as_tokens;
  as_tokens.path = train_file;
  as_tokens.validation = val_file;
  const data_sets k = open_data(as_tokens, 8, 256, 11, 50);
  CHECK(t.train->size() == corpus.train.size() / 8);
  CHECK(test::same_batches(*t.train, *k.train, 2, 16));
  CHECK(test::same_batches(*t.validation, *k.validation, 2, 16));
  CHECK(t.validation->size() == 50);
  // The text path's datasets are these windows too.
  const dataset windows = text_windows(corpus.train, 8, t.train->size(), 11, "text train");
  CHECK(windows.inputs == materialise(*k.train).inputs);
  CHECK(windows.labels == materialise(*k.train).labels);
}

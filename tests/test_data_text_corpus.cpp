// The text corpus: a folder's files in name order without fortune's .dat and .u8, the block-wise validation
// split, seeded windows whose labels are the next bytes, batches of token labels, and the errors for a missing,
// empty or too-short corpus.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <stdexcept>
#include <string>
#include <unistd.h>

#include "data/text_corpus.hpp"

using namespace ap;
namespace fs = std::filesystem;

namespace {

struct temp_dir {
  fs::path path;
  temp_dir() {
    path = fs::temp_directory_path() / ("ap_test_text_" + std::to_string(::getpid()) + "_" + std::to_string(std::random_device{}()));
    fs::create_directories(path);
  }
  ~temp_dir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string write(const std::string& name, const std::string& text) const {
    std::ofstream(path / name, std::ios::binary) << text;
    return (path / name).string();
  }
};

template <class F>
std::string error_of(F f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

TEST_CASE("text corpus: a folder's files in name order, without .dat and .u8, split block-wise") {
  temp_dir dir;
  dir.write("b", std::string(20000, 'b'));
  dir.write("a", std::string(30000, 'a'));
  dir.write("a.dat", std::string(100, 'x'));
  fs::create_symlink(dir.path / "a", dir.path / "a.u8");
  const text_corpus c = load_text_corpus(dir.path.string());
  CHECK(c.files == 2);
  REQUIRE(c.train.size() + c.validation.size() == 50000);
  // Blocks 0..8 train, block 9 (bytes 36864..40959) validation, then 10, 11, 12 train.
  CHECK(c.validation.size() == text_block_bytes);
  CHECK(c.train.front() == 'a');
  CHECK(c.train.back() == 'b');
  CHECK(c.validation.front() == 'b');  // byte 36864 is in b, which starts at 30000
  const text_corpus again = load_text_corpus(dir.path.string());
  CHECK(again.train == c.train);
  CHECK(again.validation == c.validation);
  const text_corpus one_file = load_text_corpus(dir.path.string() + "/a");
  CHECK(one_file.files == 1);
  CHECK(one_file.train.size() + one_file.validation.size() == 30000);
}

TEST_CASE("text windows: inputs are context bytes, labels the next bytes, seeded, validation in order") {
  std::vector<std::uint8_t> bytes(1000);
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = std::uint8_t(i % 251);
  const dataset d = text_windows(bytes, 8, 50, 3, "train");
  CHECK(d.size() == 50);
  CHECK(shape_of(d.inputs) == shape_t{50, 8});
  CHECK(shape_of(d.labels) == shape_t{50, 8});
  for (std::size_t w = 0; w < 50; ++w)
    for (std::size_t i = 0; i < 8; ++i) {
      CHECK(d.labels(w, i) == float((std::size_t(d.inputs(w, i)) + 1) % 251));
      if (i > 0) CHECK(d.inputs(w, i) == d.labels(w, i - 1));
    }
  CHECK(text_windows(bytes, 8, 50, 3, "train").inputs == d.inputs);
  CHECK(text_windows(bytes, 8, 50, 4, "train").inputs != d.inputs);
  const dataset v = text_windows_in_order(bytes, 8, 1000, "validation");
  CHECK(v.size() == 124);  // starts 0, 8, ..., 984: the last needs bytes up to 992
  CHECK(v.inputs(1, 0) == 8.0f);
  CHECK(text_windows_in_order(bytes, 8, 10, "validation").size() == 10);
  // A batch of token labels keeps (batch, sequence).
  const batch b = make_batch(d, {4, 2, 7}, 0, 3);
  CHECK(shape_of(b.labels) == shape_t{3, 8});
  CHECK(b.labels(1, 5) == d.labels(2, 5));
}

TEST_CASE("text corpus: a missing, empty or too-short corpus is a clear error") {
  temp_dir dir;
  CHECK(error_of([&] { load_text_corpus(dir.path.string() + "/nothing"); }).find("no such file or folder") !=
        std::string::npos);
  dir.write("x.dat", "index");
  CHECK(error_of([&] { load_text_corpus(dir.path.string()); }).find("is empty (0 files") != std::string::npos);
  const text_corpus small = load_text_corpus(dir.write("short", std::string(5000, 's')));
  CHECK(small.validation.empty());
  const std::string what = error_of([&] { check_corpus_fills(small, 128); });
  CHECK(what.find("too short for the model's context 128: its validation part holds 0 bytes") != std::string::npos);
  CHECK(what.find("key 'context'") != std::string::npos);
  const text_corpus enough = load_text_corpus(dir.write("long", std::string(50000, 'l')));
  CHECK_NOTHROW(check_corpus_fills(enough, 128));
}

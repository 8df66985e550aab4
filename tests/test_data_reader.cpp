// Fashion-MNIST and IDX reading: the real files, and every way a file can be broken.
#include <doctest/doctest.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <unistd.h>

#include "data/fashion_mnist.hpp"
#include "test_support.hpp"

namespace fs = std::filesystem;
using namespace ap;

namespace {

using namespace ap::test;

const std::string real_dir = default_fashion_mnist_dir;

// The train split is ~47 MB of pixels: load it once for all tests that read it.
const dataset& real_train() {
  static const dataset d = load_fashion_mnist("train");
  return d;
}

// A fresh directory under the system temp dir, removed with everything in it at scope exit.
struct temp_dir {
  fs::path path;
  temp_dir() {
    static std::atomic<int> counter{0};
    path = fs::temp_directory_path() /
           ("ap_test_data_" + std::to_string(::getpid()) + "_" + std::to_string(counter++) + "_" +
            std::to_string(std::random_device{}()));
    fs::create_directories(path);
  }
  ~temp_dir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string file(const std::string& name) const { return (path / name).string(); }
};

// An IDX file of unsigned bytes: magic 00 00 08 ndims, big-endian dims, then the payload.
std::vector<unsigned char> idx_bytes(const std::vector<std::uint32_t>& dims,
                                     const std::vector<unsigned char>& payload) {
  std::vector<unsigned char> out = {0, 0, 0x08, static_cast<unsigned char>(dims.size())};
  for (std::uint32_t d : dims)
    for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<unsigned char>(d >> shift));
  out.insert(out.end(), payload.begin(), payload.end());
  return out;
}

void write_gzip(const std::string& path, const std::vector<unsigned char>& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  REQUIRE(f != nullptr);
  if (!bytes.empty()) REQUIRE(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())) ==
                              static_cast<int>(bytes.size()));
  REQUIRE(gzclose(f) == Z_OK);
}

void write_raw(const std::string& path, const std::vector<unsigned char>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  REQUIRE(out.good());
}

std::vector<unsigned char> read_raw(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<unsigned char>(std::istreambuf_iterator<char>(in), {});
}

// The text of the std::runtime_error that f throws, or "" (and a failed check) if it throws none.
template <class F>
std::string runtime_error_of(F f) {
  try {
    f();
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  FAIL_CHECK("expected a std::runtime_error");
  return "";
}

// A well-formed split of `n` 28x28 images and `m` labels in `dir`, gzip-compressed like the real files.
void write_split(const temp_dir& dir, const std::string& prefix, std::uint32_t n, std::uint32_t m) {
  std::vector<unsigned char> pixels(std::size_t{n} * 784);
  for (std::size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<unsigned char>(i * 7);
  std::vector<unsigned char> labels(m);
  for (std::size_t i = 0; i < m; ++i) labels[i] = static_cast<unsigned char>(i % 10);
  write_gzip(dir.file(prefix + "-images-idx3-ubyte.gz"), idx_bytes({n, 28, 28}, pixels));
  write_gzip(dir.file(prefix + "-labels-idx1-ubyte.gz"), idx_bytes({m}, labels));
}

void check_class_counts(const dataset& d, std::size_t per_class) {
  std::vector<std::size_t> counts(d.num_classes, 0);
  std::size_t bad = 0;
  for (float label : d.labels) {
    const bool is_class = label >= 0.0f && label < static_cast<float>(d.num_classes) &&
                          label == static_cast<float>(static_cast<std::size_t>(label));
    if (is_class) ++counts[static_cast<std::size_t>(label)]; else ++bad;
  }
  CHECK(bad == 0);
  for (std::size_t c = 0; c < counts.size(); ++c) {
    INFO("class " << c);
    CHECK(counts[c] == per_class);
  }
}

}  // namespace

TEST_CASE("load_fashion_mnist train: shape, pixel range, balanced classes") {
  const auto start = std::chrono::steady_clock::now();
  const dataset& d = real_train();
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  MESSAGE("first load of the train split took " << ms << " ms");

  CHECK(d.name == "fashion-mnist/train");
  CHECK(shape_of(d.inputs) == shape_t{60000, 784});
  CHECK(shape_of(d.labels) == shape_t{60000});
  CHECK(d.size() == 60000);
  CHECK(d.num_classes == 10);
  float lo = 1.0f, hi = 0.0f;
  for (float p : d.inputs) lo = std::min(lo, p), hi = std::max(hi, p);
  CHECK(lo == 0.0f);
  CHECK(hi == 1.0f);  // 255 / 255 is exactly 1
  check_class_counts(d, 6000);
}

TEST_CASE("load_fashion_mnist test: shape, pixel range, balanced classes") {
  const dataset d = load_fashion_mnist("test", real_dir);
  CHECK(d.name == "fashion-mnist/test");
  CHECK(shape_of(d.inputs) == shape_t{10000, 784});
  CHECK(shape_of(d.labels) == shape_t{10000});
  float lo = 1.0f, hi = 0.0f;
  for (float p : d.inputs) lo = std::min(lo, p), hi = std::max(hi, p);
  CHECK(lo == 0.0f);
  CHECK(hi == 1.0f);
  check_class_counts(d, 1000);
}

TEST_CASE("load_fashion_mnist agrees with the raw bytes of the files") {
  // Decompress the files independently of read_idx: labels start at byte 8, pixels at byte 16.
  auto gunzip = [](const std::string& path) {
    gzFile f = gzopen(path.c_str(), "rb");
    REQUIRE(f != nullptr);
    std::vector<unsigned char> out;
    unsigned char buf[1 << 16];
    int r;
    while ((r = gzread(f, buf, sizeof buf)) > 0) out.insert(out.end(), buf, buf + r);
    gzclose(f);
    return out;
  };
  const auto labels = gunzip(real_dir + "/train-labels-idx1-ubyte.gz");
  const auto images = gunzip(real_dir + "/train-images-idx3-ubyte.gz");
  REQUIRE(labels.size() == 8 + 60000);
  REQUIRE(images.size() == 16 + 60000 * 784);

  const dataset& d = real_train();
  CHECK(labels[8] == 9);          // Fashion-MNIST train sample 0 is class 9, "Ankle boot"
  CHECK(d.labels(0) == 9.0f);
  CHECK(d.labels(59999) == static_cast<float>(labels[8 + 59999]));
  for (std::size_t i : {std::size_t{0}, std::size_t{12345}, std::size_t{60000 * 784 - 1}})
    CHECK(d.inputs.data()[i] == static_cast<float>(images[16 + i]) / 255.0f);
}

TEST_CASE("read_idx reads gzip and raw IDX files alike") {
  temp_dir dir;
  const std::vector<unsigned char> payload = {1, 2, 3, 4, 5, 6};
  write_gzip(dir.file("a.gz"), idx_bytes({2, 3}, payload));
  write_raw(dir.file("a.raw"), idx_bytes({2, 3}, payload));
  for (const std::string name : {"a.gz", "a.raw"}) {
    INFO(name);
    const idx_file f = read_idx(dir.file(name));
    CHECK(f.dims == std::vector<std::size_t>{2, 3});
    CHECK(f.bytes == payload);
  }
  const idx_file labels = read_idx(real_dir + "/t10k-labels-idx1-ubyte.gz");
  CHECK(labels.dims == std::vector<std::size_t>{10000});
  CHECK(labels.bytes.size() == 10000);
}

TEST_CASE("load_fashion_mnist: a missing file names the file") {
  temp_dir dir;
  const std::string msg = runtime_error_of([&] { load_fashion_mnist("train", dir.path.string()); });
  INFO(msg);
  CHECK(contains(msg, dir.file("train-images-idx3-ubyte.gz")));
  CHECK(contains(msg, "cannot open"));
  CHECK(contains(msg, "No such file"));
}

TEST_CASE("read_idx: bad magic names the file") {
  temp_dir dir;
  const std::string path = dir.file("t10k-images-idx3-ubyte.gz");
  auto bytes = idx_bytes({1, 28, 28}, std::vector<unsigned char>(784, 0));
  bytes[0] = 0x12;
  write_gzip(path, bytes);
  const std::string msg = runtime_error_of([&] { load_fashion_mnist("test", dir.path.string()); });
  INFO(msg);
  CHECK(contains(msg, path));
  CHECK(contains(msg, "bad magic"));

  bytes[0] = 0;
  bytes[2] = 0x0D;  // float elements: a valid IDX type we do not read
  write_gzip(path, bytes);
  const std::string type_msg = runtime_error_of([&] { read_idx(path); });
  INFO(type_msg);
  CHECK(contains(type_msg, path));
  CHECK(contains(type_msg, "bad magic"));
  CHECK(contains(type_msg, "0x0d"));
}

TEST_CASE("read_idx: a valid gzip holding fewer bytes than the dims promise is truncated") {
  temp_dir dir;
  const std::string path = dir.file("train-images-idx3-ubyte.gz");
  write_gzip(path, idx_bytes({60000, 28, 28}, std::vector<unsigned char>(1000, 7)));
  const std::string msg = runtime_error_of([&] { read_idx(path); });
  INFO(msg);
  CHECK(contains(msg, path));
  CHECK(contains(msg, "truncated"));
  CHECK(contains(msg, "expected 47040000 bytes"));
  CHECK(contains(msg, "got 1000"));

  write_gzip(path, {0, 0, 8, 3, 0, 0});  // ends inside the dimensions
  const std::string header_msg = runtime_error_of([&] { read_idx(path); });
  INFO(header_msg);
  CHECK(contains(header_msg, path));
  CHECK(contains(header_msg, "truncated"));

  write_gzip(path, {});  // empty
  const std::string empty_msg = runtime_error_of([&] { read_idx(path); });
  INFO(empty_msg);
  CHECK(contains(empty_msg, "truncated"));
}

TEST_CASE("read_idx: more bytes than the dims promise is trailing garbage") {
  temp_dir dir;
  const std::string path = dir.file("labels.gz");
  write_gzip(path, idx_bytes({3}, {1, 2, 3, 4}));
  const std::string msg = runtime_error_of([&] { read_idx(path); });
  INFO(msg);
  CHECK(contains(msg, path));
  CHECK(contains(msg, "trailing garbage"));
}

TEST_CASE("read_idx: a file that is not gzip but garbage") {
  temp_dir dir;
  const std::string path = dir.file("train-labels-idx1-ubyte.gz");
  const std::string text = "this is not a gzip file, nor an IDX file\n";
  write_raw(path, std::vector<unsigned char>(text.begin(), text.end()));
  const std::string msg = runtime_error_of([&] { read_idx(path); });
  INFO(msg);
  CHECK(contains(msg, path));
  CHECK(contains(msg, "bad magic"));
}

TEST_CASE("read_idx: a damaged gzip stream reports zlib's message") {
  temp_dir dir;
  const std::string good = dir.file("good.gz");
  std::vector<unsigned char> payload(20000);
  for (std::size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<unsigned char>((i * i) >> 3);
  write_gzip(good, idx_bytes({20000}, payload));
  const auto compressed = read_raw(good);
  REQUIRE(compressed.size() > 100);

  SUBCASE("cut short") {
    const std::string path = dir.file("cut.gz");
    write_raw(path, std::vector<unsigned char>(compressed.begin(), compressed.begin() + compressed.size() / 2));
    const std::string msg = runtime_error_of([&] { read_idx(path); });
    INFO(msg);
    CHECK(contains(msg, path));
    CHECK(contains(msg, "truncated gzip stream"));
  }
  SUBCASE("bytes flipped in the deflate data") {
    const std::string path = dir.file("flipped.gz");
    auto broken = compressed;
    for (std::size_t i = 20; i < 60; ++i) broken[i] ^= 0x5A;
    write_raw(path, broken);
    const std::string msg = runtime_error_of([&] { read_idx(path); });
    INFO(msg);
    CHECK(contains(msg, path));
    CHECK(contains(msg, "corrupt gzip stream"));
  }
  SUBCASE("wrong CRC in the trailer") {
    const std::string path = dir.file("crc.gz");
    auto broken = compressed;
    broken[broken.size() - 8] ^= 0xFF;  // first byte of the CRC-32
    write_raw(path, broken);
    const std::string msg = runtime_error_of([&] { read_idx(path); });
    INFO(msg);
    CHECK(contains(msg, path));
    CHECK(contains(msg, "corrupt gzip stream"));
    CHECK(contains(msg, "incorrect data check"));
  }
}

TEST_CASE("load_fashion_mnist: image and label counts must agree") {
  temp_dir dir;
  write_split(dir, "t10k", 5, 4);
  const std::string msg = runtime_error_of([&] { load_fashion_mnist("test", dir.path.string()); });
  INFO(msg);
  CHECK(contains(msg, dir.file("t10k-images-idx3-ubyte.gz")));
  CHECK(contains(msg, dir.file("t10k-labels-idx1-ubyte.gz")));
  CHECK(contains(msg, "mismatch"));
  CHECK(contains(msg, "5 images"));
  CHECK(contains(msg, "4 labels"));
}

TEST_CASE("load_fashion_mnist: a small well-formed split in another directory") {
  temp_dir dir;
  write_split(dir, "t10k", 3, 3);
  const dataset d = load_fashion_mnist("test", dir.path.string());
  CHECK(shape_of(d.inputs) == shape_t{3, 784});
  CHECK(d.inputs(1, 2) == static_cast<float>(static_cast<unsigned char>((784 + 2) * 7)) / 255.0f);
  CHECK(d.labels(2) == 2.0f);
}

TEST_CASE("load_fashion_mnist: bad labels, wrong image shape and unknown split") {
  temp_dir dir;
  write_split(dir, "t10k", 2, 2);
  write_gzip(dir.file("t10k-labels-idx1-ubyte.gz"), idx_bytes({2}, {3, 10}));
  std::string msg = runtime_error_of([&] { load_fashion_mnist("test", dir.path.string()); });
  INFO(msg);
  CHECK(contains(msg, dir.file("t10k-labels-idx1-ubyte.gz")));
  CHECK(contains(msg, "bad label 10 at index 1"));

  write_gzip(dir.file("t10k-images-idx3-ubyte.gz"), idx_bytes({2, 784}, std::vector<unsigned char>(2 * 784)));
  msg = runtime_error_of([&] { load_fashion_mnist("test", dir.path.string()); });
  CHECK(contains(msg, dir.file("t10k-images-idx3-ubyte.gz")));
  CHECK(contains(msg, "28, 28"));

  CHECK_THROWS_AS(load_fashion_mnist("validation", real_dir), std::invalid_argument);
}

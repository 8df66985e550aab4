// Token files written by numpy: raw uint16 (nanoGPT's train.bin) and uint32 arrays and llm.c's .bin read
// memory-mapped, and every bad file refused naming the file and the place.
#include <doctest/doctest.h>

#include <cstdlib>
#include <fstream>

#include "data/open_data.hpp"
#include "data/token_file.hpp"
#include "data_files.hpp"
#include "test_support.hpp"

using namespace ap;
using ap::test::contains;
using ap::test::error_of;
using ap::test::numpy;

namespace {

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_all(const std::string& path, const std::string& bytes) { std::ofstream(path, std::ios::binary) << bytes; }

}  // namespace

TEST_CASE("numpy's raw uint16 and uint32 token files and llm.c's .bin read as the same tokens") {
  test::scratch_dir dir("token_file");
  numpy(dir, R"(
t = (np.arange(10000) * 7919 % 50257).astype(np.uint16)
t.tofile(d + 'train.bin')
m = np.memmap(d + 'mm.u16', dtype=np.uint16, mode='w+', shape=t.shape); m[:] = t; m.flush(); del m
t.astype(np.uint32).tofile(d + 'wide.u32')
h = np.zeros(256, dtype=np.int32); h[0] = 20240520; h[1] = 1; h[2] = len(t)
with open(d + 'llmc.bin', 'wb') as f:
    f.write(h.tobytes()); f.write(t.tobytes())
)");
  const token_span raw = open_token_file(dir.file("train.bin"), token_file_kind::raw, 2, 50257);
  const token_span mm = open_token_file(dir.file("mm.u16"), token_file_kind::raw, 2, 50257);
  const token_span wide = open_token_file(dir.file("wide.u32"), token_file_kind::raw, 4, 50257);
  const token_span llmc = open_token_file(dir.file("llmc.bin"), token_file_kind::llmc, 2, 50257);
  REQUIRE(raw.count == 10000);
  REQUIRE(mm.count == 10000);
  REQUIRE(wide.count == 10000);
  REQUIRE(llmc.count == 10000);
  for (std::size_t i = 0; i < 10000; ++i) {
    const std::size_t expected = i * 7919 % 50257;
    REQUIRE(raw.at(i) == expected);
    REQUIRE(mm.at(i) == expected);
    REQUIRE(wide.at(i) == expected);
    REQUIRE(llmc.at(i) == expected);
  }
  CHECK(has_llmc_magic(dir.file("llmc.bin")));
  CHECK(!has_llmc_magic(dir.file("train.bin")));

  // open_data: llm.c by its magic, raw by extension; the held-out last tenth validates.
  data_config c;
  c.path = dir.file("llmc.bin");
  CHECK(data_format_of(c) == "llmc");
  const data_sets s = open_data(c, 16, 50257, 1, 1000);
  CHECK(s.train->num_classes() == 50257);
  CHECK(s.train->size() == 9000 / 16);
  CHECK(s.validation->size() == (1000 - 1) / 16);
  const std::size_t first = 0;
  CHECK(s.validation->gather(&first, 1).inputs(0, 0) == float(9000 * 7919 % 50257));
  c.path = dir.file("wide.u32");
  c.token_bytes = 2;  // the extension says 4
  c.validation_fraction = 0.5;
  CHECK(open_data(c, 16, 50257, 1, 1000).train->size() == 5000 / 16);
  c.limit = 7;
  CHECK(open_data(c, 16, 50257, 1, 1000).train->size() == 7);
}

TEST_CASE("bad token files are refused naming the file and the place") {
  test::scratch_dir dir("token_bad");
  numpy(dir, R"(
t = np.array([1, 2, 3, 70000 % 65536, 5, 60000], dtype=np.uint16)
t.tofile(d + 'big_id.bin')
h = np.zeros(256, dtype=np.int32); h[0] = 20240520; h[1] = 1; h[2] = 100
with open(d + 'short.bin', 'wb') as f:
    f.write(h.tobytes()); f.write(np.arange(50, dtype=np.uint16).tobytes())
h[1] = 2
with open(d + 'v2.bin', 'wb') as f:
    f.write(h.tobytes()); f.write(np.arange(100, dtype=np.uint32).tobytes())
h[0] = 20240519; h[1] = 1
with open(d + 'magic.bin', 'wb') as f:
    f.write(h.tobytes()); f.write(np.arange(100, dtype=np.uint16).tobytes())
)");
  const std::string missing = dir.file("missing.bin");
  CHECK(contains(error_of([&] { open_token_file(missing, token_file_kind::raw); }), missing + ": cannot open"));
  write_all(dir.file("empty.bin"), "");
  CHECK(contains(error_of([&] { open_token_file(dir.file("empty.bin"), token_file_kind::raw); }),
                 dir.file("empty.bin") + ": empty"));
  write_all(dir.file("odd.bin"), std::string(7, 'x'));
  CHECK(contains(error_of([&] { open_token_file(dir.file("odd.bin"), token_file_kind::raw, 2); }),
                 dir.file("odd.bin") + ": length 7 bytes is not a multiple of the token size 2"));
  CHECK(contains(error_of([&] { open_token_file(dir.file("odd.bin"), token_file_kind::raw, 4); }),
                 "length 7 bytes is not a multiple of the token size 4"));
  CHECK_THROWS_AS(open_token_file(dir.file("odd.bin"), token_file_kind::raw, 3), std::invalid_argument);
  CHECK(contains(error_of([&] { open_token_file(dir.file("big_id.bin"), token_file_kind::raw, 2, 50257); }),
                 dir.file("big_id.bin") + ": token 5 (byte offset 10) is 60000, not below the vocabulary size 50257"));
  CHECK(contains(error_of([&] { open_token_file(dir.file("big_id.bin"), token_file_kind::raw, 2, 3); }),
                 "token 2 (byte offset 4) is 3, not below the vocabulary size 3"));
  CHECK(contains(error_of([&] { open_token_file(dir.file("short.bin"), token_file_kind::llmc); }),
                 dir.file("short.bin") + ": truncated: the header at byte 8 promises 100 tokens (1224 bytes), the file holds 1124"));
  CHECK(contains(error_of([&] { open_token_file(dir.file("v2.bin"), token_file_kind::llmc); }),
                 dir.file("v2.bin") + ": unsupported version 2 at byte 4"));
  CHECK(contains(error_of([&] { open_token_file(dir.file("magic.bin"), token_file_kind::llmc); }),
                 dir.file("magic.bin") + ": bad magic 20240519 at byte 0"));
  write_all(dir.file("tiny.bin"), read_all(dir.file("magic.bin")).substr(0, 100));
  CHECK(contains(error_of([&] { open_token_file(dir.file("tiny.bin"), token_file_kind::llmc); }),
                 "truncated: 100 bytes, shorter than llm.c's header of 1024"));
  // open_data: a token id checked against the model's vocabulary, unknown extensions, classification files.
  data_config c;
  c.path = dir.file("big_id.bin");
  CHECK(contains(error_of([&] { open_data(c, 2, 256, 1, 10); }), "token 3 (byte offset 6) is 4464, not below the vocabulary size 256"));
  c.path = dir.file("data.parquet");
  write_all(c.path, "PAR1");
  const std::string unknown = error_of([&] { open_data(c, 2, 256, 1, 10); });
  CHECK(contains(unknown, c.path + ": unknown format (extension '.parquet'"));
  CHECK(contains(unknown, "npy (.npy), csv (.csv), llmc"));
  c.path = dir.file("missing.u16");
  CHECK(contains(error_of([&] { open_data(c, 2, 256, 1, 10); }), c.path + ": no such file or folder"));
}

TEST_CASE("reading windows of a mapped token file leaves no pages of it resident (Note [released windows])") {
  test::scratch_dir dir("token_rss");
  const std::string path = dir.file("big.bin");
  {
    std::vector<std::uint16_t> chunk(std::size_t{1} << 20);
    for (std::size_t i = 0; i < chunk.size(); ++i) chunk[i] = std::uint16_t(i % 256);
    std::ofstream out(path, std::ios::binary);
    for (int c = 0; c < 32; ++c) out.write(reinterpret_cast<const char*>(chunk.data()), std::streamsize(chunk.size() * 2));
  }  // 64 MiB
  const auto rss_file_kib = [] {
    std::ifstream in("/proc/self/status");
    std::string line;
    while (std::getline(in, line))
      if (line.rfind("RssFile:", 0) == 0) return std::stol(line.substr(8));
    return -1L;
  };
  const token_span tokens = open_token_file(path, token_file_kind::raw, 2, 256);
  const auto source = token_windows(tokens, 64, tokens.count / 64, 1, 256, path);
  const long before = rss_file_kib();
  REQUIRE(before >= 0);
  const sample_order order(source->size(), 2, 0);
  for (std::size_t b = 0; b < 25; ++b) {
    const batch x = gather_batch(*source, order, b, 16);
    REQUIRE(x.labels(3, 0) == float((std::size_t(x.inputs(3, 0)) + 1) % 256));
  }
  // 400 windows at random starts: without the release at least 400 pages (and a whole folio each on kernels
  // mapping large folios) would stay mapped.
  CHECK(rss_file_kib() - before < 1024);
}

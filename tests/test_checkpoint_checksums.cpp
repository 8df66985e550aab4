// Every tensor of a checkpoint and its metadata carry a CRC32C; a flipped bit in a weight, in the optimizer's state, in
// the metadata or in a checksum, and a truncated file, are refused naming the file (and the tensor) before anything
// changes; a checkpoint written before checksums loads unchecked (Note [checkpoint checksums]). The
// CRC32C itself: the standard check values, any split of the input, the hardware's three streams against the table.
#include <doctest/doctest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.hpp"
#include "checkpoint/safetensors.hpp"
#include "failure/crc32c.hpp"
#include "model/optimizer.hpp"
#include "model/sequential.hpp"
#include "test_support.hpp"

using namespace ap;

namespace {

sequential small_model(std::uint64_t seed) {
  sequential_options o;
  o.seed = seed;
  return sequential::from_spec("784-64-10", o);
}

std::unique_ptr<optimizer> adam() {
  optimizer_config c;
  c.kind = "adam";
  c.lr = 1e-3f;
  return make_optimizer(c);
}

std::vector<char> bytes_of(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<char>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void write_bytes(const std::string& path, const std::vector<char>& bytes) {
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// Where a tensor's bytes start in the file: 8 + the header's length + its first data offset.
std::size_t data_start(const std::string& path) {
  const std::vector<char> bytes = bytes_of(path);
  std::uint64_t header = 0;
  std::memcpy(&header, bytes.data(), sizeof header);
  return 8 + static_cast<std::size_t>(header);
}

// A copy of `from` at `to` with bit `bit` of byte `at` flipped.
void flip(const std::string& from, const std::string& to, std::size_t at, int bit = 0) {
  std::vector<char> bytes = bytes_of(from);
  REQUIRE(at < bytes.size());
  bytes[at] = static_cast<char>(bytes[at] ^ (1 << bit));
  write_bytes(to, bytes);
}

// The refusal of loading `path` into a fresh model and optimizer, which it must leave unchanged.
std::string refusal(const std::string& path) {
  sequential target = small_model(7);
  sequential before = target.clone();
  auto opt = adam();
  const std::string message = test::error_of([&] { load_checkpoint(path, target, opt.get()); });
  for (std::size_t i = 0; i < target.parameters().size(); ++i) {
    const tensor& now = *target.parameters()[i].value;
    const tensor& was = *before.parameters()[i].value;
    CHECK(std::memcmp(now.bytes(), was.bytes(), now.byte_size()) == 0);  // a refused load changes nothing
  }
  return message;
}

}  // namespace

namespace {

// CRC32C bit by bit, as RFC 3720 defines it: what ISA-L's is checked against.
std::uint32_t crc32c_bitwise(const unsigned char* p, std::size_t n) {
  std::uint32_t c = ~0u;
  while (n--) {
    c ^= *p++;
    for (int bit = 0; bit < 8; ++bit) c = (c >> 1) ^ ((c & 1u) ? 0x82f63b78u : 0u);
  }
  return ~c;
}

}  // namespace

TEST_CASE("CRC32C: the standard check values, any split of the input, the bitwise definition") {
  CHECK(crc32c("123456789", 9) == 0xe3069283u);  // RFC 3720's check value
  CHECK(crc32c("", 0) == 0u);
  const std::vector<unsigned char> zeros(32, 0), ones(32, 0xff);
  CHECK(crc32c(zeros.data(), zeros.size()) == 0x8a9136aau);  // RFC 3720, B.4
  CHECK(crc32c(ones.data(), ones.size()) == 0x62a8ab43u);
  std::vector<unsigned char> data(200000);
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<unsigned char>((i * 2654435761u) >> 13);
  for (std::size_t n : {std::size_t{1}, std::size_t{7}, std::size_t{767}, std::size_t{768}, std::size_t{24576},
                        std::size_t{24577}, std::size_t{100003}, data.size()}) {
    CAPTURE(n);
    const std::uint32_t whole = crc32c(data.data(), n);
    CHECK(whole == crc32c_bitwise(data.data(), n));
    for (std::size_t cut : {std::size_t{0}, n / 3, n - 1, n})
      CHECK(crc32c(data.data() + cut, n - cut, crc32c(data.data(), cut)) == whole);
  }
}

TEST_CASE("a checkpoint's flipped bit (a weight, the optimizer's state, the metadata, a checksum) or truncation is refused, naming the file") {
  test::scratch_dir dir{"checkpoint_checksums"};
  const std::string path = dir.file("run.safetensors"), bad = dir.file("bad.safetensors");
  sequential model = small_model(1);
  auto opt = adam();
  opt->init_state(model.parameters());
  opt->set_steps(3);  // as after 3 steps: its state is saved and loaded (Note [fresh optimizer state])
  save_checkpoint(path, model, opt.get(), training_state{3, 0, 3, 1, "784-64-10"});
  const safetensors_header header = read_safetensors_header(path);
  CHECK(header.metadata.count("metadata_crc32c") == 1);
  CHECK(header.metadata.at("crc32c:0.weight").size() == 8);
  CHECK(read_checkpoint_info(path).checksums);
  {
    sequential fine = small_model(7);
    auto fine_opt = adam();
    CHECK(load_checkpoint(path, fine, fine_opt.get()).step == 3);  // as written: loads
  }
  const std::size_t data = data_start(path);

  SUBCASE("byte 2192 (the first tensor's bytes), as once resumed from silently") {
    REQUIRE(data < 2192);
    flip(path, bad, 2192, 3);
    const std::string why = refusal(bad);
    CHECK(test::contains(why, "checkpoint " + bad + ": tensor "));
    CHECK(test::contains(why, " fails its checksum (CRC32C "));
  }
  SUBCASE("every tensor: a bit in its last byte") {
    const safetensors_file file = read_safetensors(path);
    std::size_t end = data;  // tensors tile the data section in the header's order of offsets; find each by size
    std::vector<std::pair<std::size_t, std::string>> ends;
    // The file's own offsets: read back from the header text.
    const std::vector<char> bytes = bytes_of(path);
    const std::string text(bytes.begin() + 8, bytes.begin() + static_cast<std::ptrdiff_t>(data));
    for (const auto& [name, t] : file.tensors) {
      const std::size_t at = text.find("\"" + name + "\"");
      REQUIRE(at != std::string::npos);
      const std::size_t offsets = text.find("data_offsets", at);
      const std::size_t comma = text.find(',', offsets);
      const std::size_t stop = std::stoul(text.substr(comma + 1));
      ends.emplace_back(data + stop - 1, name);
      end = std::max(end, data + stop);
    }
    CHECK(end == bytes.size());
    for (const auto& [last, name] : ends) {
      CAPTURE(name);
      flip(path, bad, last, 6);
      CHECK(test::contains(refusal(bad), "checkpoint " + bad + ": tensor " + name + " fails its checksum"));
    }
  }
  SUBCASE("the header: the step's digit, a tensor's checksum, the metadata's checksum") {
    const std::vector<char> bytes = bytes_of(path);
    const std::string text(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(data));
    const std::size_t step = text.find("\"step\":\"3\"");
    REQUIRE(step != std::string::npos);
    flip(path, bad, step + 8, 1);  // "3" -> "1": a number still, another step
    CHECK(test::contains(refusal(bad), "checkpoint " + bad + ": its header's metadata fails its checksum"));
    CHECK(test::contains(test::error_of([&] { read_checkpoint_info(bad); }), "its header's metadata fails its checksum"));
    const std::size_t sum = text.find("\"crc32c:2.bias\":\"");
    REQUIRE(sum != std::string::npos);
    std::vector<char> edited = bytes;
    char& digit = edited[sum + 17];
    digit = digit == '0' ? '1' : '0';
    write_bytes(bad, edited);
    CHECK(test::contains(refusal(bad), "fails its checksum"));
    const std::size_t own = text.find("\"metadata_crc32c\":\"");
    REQUIRE(own != std::string::npos);
    edited = bytes;
    edited[own + 19] = edited[own + 19] == 'a' ? 'b' : 'a';
    write_bytes(bad, edited);
    CHECK(test::contains(refusal(bad), "its header's metadata fails its checksum"));
  }
  SUBCASE("truncated: the last byte, or half the file") {
    std::vector<char> bytes = bytes_of(path);
    for (std::size_t keep : {bytes.size() - 1, bytes.size() / 2, std::size_t{100}}) {
      CAPTURE(keep);
      write_bytes(bad, std::vector<char>(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(keep)));
      CHECK(test::contains(refusal(bad), bad));
    }
  }
  SUBCASE("a slice (a pipeline stage's layers) checks the tensors it reads") {
    flip(path, bad, bytes_of(path).size() - 1, 2);  // the last tensor's last byte
    sequential whole = small_model(7);
    bool refused_somewhere = false;
    for (const auto& [first, last] : {std::pair<std::size_t, std::size_t>{0, 2}, {2, 3}}) {
      sequential slice = whole.slice(first, last);
      auto slice_opt = adam();
      const std::string why = test::error_of([&] { load_checkpoint_slice(bad, slice, slice_opt.get()); });
      if (why != "no exception") {
        CHECK(test::contains(why, "fails its checksum"));
        refused_somewhere = true;
      }
    }
    CHECK(refused_somewhere);
  }
}

TEST_CASE("a checkpoint written before checksums (no metadata_crc32c) still loads, unchecked") {
  test::scratch_dir dir{"checkpoint_checksums_old"};
  const std::string path = dir.file("run.safetensors"), old = dir.file("old.safetensors");
  sequential model = small_model(1);
  save_checkpoint(path, model, nullptr, training_state{5, 1, 0, 1, "784-64-10"});
  safetensors_file file = read_safetensors(path);
  for (auto it = file.metadata.begin(); it != file.metadata.end();)
    it = it->first.rfind("crc32c:", 0) == 0 || it->first == "metadata_crc32c" ? file.metadata.erase(it) : std::next(it);
  write_safetensors(old, file.tensors, file.metadata);
  CHECK_FALSE(read_checkpoint_info(old).checksums);
  sequential loaded = small_model(9);
  CHECK(load_checkpoint(old, loaded, nullptr).step == 5);
  CHECK(std::memcmp(loaded.parameters()[0].value->bytes(), model.parameters()[0].value->bytes(),
                    model.parameters()[0].value->byte_size()) == 0);
}

// bf16 and checkpoints: exported BF16 weights (Note [exported weights]) read back by an independent reader
// written here from the safetensors specification (not checkpoint/safetensors.cpp); checkpoints keep float32
// masters; a checkpoint tensor of another dtype than the model's is refused, naming the tensor.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>

#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint.hpp"
#include "checkpoint/safetensors.hpp"
#include "model/sequential.hpp"
#include "test_support.hpp"

using namespace ap;

namespace {

// The format from its specification: u64 little-endian header size, JSON header, raw little-endian data.
// BF16 is the upper half of an IEEE float32.
struct independent_tensor {
  std::string dtype;
  std::vector<std::size_t> shape;
  std::vector<float> values;
};
struct independent_file {
  std::map<std::string, independent_tensor> tensors;
  nlohmann::json metadata;
};

independent_file read_independently(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  const std::vector<unsigned char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  REQUIRE(bytes.size() >= 8);
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | bytes[static_cast<std::size_t>(i)];
  REQUIRE(8 + n <= bytes.size());
  const nlohmann::json header = nlohmann::json::parse(bytes.begin() + 8, bytes.begin() + 8 + static_cast<long>(n));
  const std::size_t data = 8 + n;
  independent_file f;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      f.metadata = entry;
      continue;
    }
    independent_tensor t;
    t.dtype = entry.at("dtype").get<std::string>();
    t.shape = entry.at("shape").get<std::vector<std::size_t>>();
    const auto offsets = entry.at("data_offsets").get<std::vector<std::size_t>>();
    REQUIRE(offsets.size() == 2);
    const std::size_t width = t.dtype == "BF16" ? 2 : 4;
    for (std::size_t at = data + offsets[0]; at < data + offsets[1]; at += width) {
      std::uint32_t u = 0;
      if (width == 2)
        u = (std::uint32_t(bytes[at]) | std::uint32_t(bytes[at + 1]) << 8) << 16;
      else
        u = std::uint32_t(bytes[at]) | std::uint32_t(bytes[at + 1]) << 8 | std::uint32_t(bytes[at + 2]) << 16 |
            std::uint32_t(bytes[at + 3]) << 24;
      float v;
      std::memcpy(&v, &u, 4);
      t.values.push_back(v);
    }
    f.tensors[name] = std::move(t);
  }
  return f;
}

}  // namespace

TEST_CASE("exported BF16 weights: an independent reader finds every parameter, rounded to bfloat16") {
  test::scratch_dir dir{"export_bf16"};
  sequential model = sequential::from_spec("12-16-4", sequential_options{"relu", 5});
  model.set_compute_dtype(dtype::bfloat16);
  const std::string path = dir.file("weights.safetensors");
  export_weights(path, model, dtype::bfloat16);
  const independent_file f = read_independently(path);
  CHECK(f.metadata.at("format") == exported_weights_format);
  CHECK(f.metadata.at("dtype") == "bfloat16");
  CHECK(f.metadata.at("model") == "linear:12:16;relu;linear:16:4");
  const auto params = model.parameters();
  REQUIRE(f.tensors.size() == params.size());
  for (const parameter& p : params) {
    INFO(p.name);
    const independent_tensor& t = f.tensors.at(p.name);
    CHECK(t.dtype == "BF16");
    CHECK(t.shape == p.value->shape());
    REQUIRE(t.values.size() == p.value->size());
    for (std::size_t i = 0; i < t.values.size(); ++i) {
      const float w = p.value->data()[i];
      CHECK(t.values[i] == to_float(to_bfloat16(w)));                    // round to nearest even
      CHECK(std::abs(t.values[i] - w) <= std::abs(w) * (1.0f / 256.0f));  // within half a bf16 ulp
    }
  }
  // And F32 is exact.
  export_weights(dir.file("weights32.safetensors"), model, dtype::float32);
  const independent_file g = read_independently(dir.file("weights32.safetensors"));
  for (const parameter& p : params)
    CHECK(g.tensors.at(p.name).values == std::vector<float>(p.value->begin(), p.value->end()));
}

TEST_CASE("a bf16 model checkpoints float32 masters, and a checkpoint tensor of another dtype is refused naming it") {
  test::scratch_dir dir{"checkpoint_dtype"};
  sequential model = sequential::from_spec("12-16-4", sequential_options{"relu", 5});
  model.set_compute_dtype(dtype::bfloat16);
  const std::string path = dir.file("model.safetensors");
  save_checkpoint(path, model, nullptr, training_state{});
  safetensors_file file = read_safetensors(path);
  for (const auto& [name, t] : file.tensors) CHECK(t.type() == dtype::float32);

  // The same file with one tensor in BF16: refused, naming the tensor and both dtypes; nothing changes.
  file.tensors["2.weight"] = file.tensors["2.weight"].astype(dtype::bfloat16);
  const std::string bad = dir.file("bf16_tensor.safetensors");
  write_safetensors(bad, file.tensors, file.metadata);
  sequential other = sequential::from_spec("12-16-4", sequential_options{"relu", 6});
  const tensor before = *other.parameters()[0].value;
  std::string error;
  try {
    load_checkpoint(bad, other, nullptr);
  } catch (const std::runtime_error& e) {
    error = e.what();
  }
  INFO(error);
  CHECK(test::contains(error, "tensor 2.weight"));
  CHECK(test::contains(error, "bfloat16 (16, 4)"));
  CHECK(test::contains(error, "float32 (16, 4)"));
  CHECK(*other.parameters()[0].value == before);
}

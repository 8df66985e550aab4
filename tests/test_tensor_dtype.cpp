// Tensors with a dtype: float32 and bfloat16 storage, conversions, rank-3 tensors and errors.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <sys/resource.h>
#include <vector>

#include "tensor/tensor.hpp"
#include "tensor/tensor_memory.hpp"
#include "test_support.hpp"

using namespace ap;
using namespace ap::test;

namespace {

float bits_to_float(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

}  // namespace

TEST_CASE("dtype names: one table for the CLI, safetensors and errors") {
  CHECK(dtype_size(dtype::float32) == 4);
  CHECK(dtype_size(dtype::bfloat16) == 2);
  CHECK(std::string(dtype_name(dtype::bfloat16)) == "bfloat16");
  CHECK(std::string(safetensors_dtype_name(dtype::bfloat16)) == "BF16");
  for (const char* text : {"bf16", "bfloat16", "BF16"}) CHECK(parse_dtype(text) == dtype::bfloat16);
  for (const char* text : {"fp32", "float32", "F32", "f32"}) CHECK(parse_dtype(text) == dtype::float32);
  CHECK_FALSE(parse_dtype("fp16").has_value());
  CHECK_FALSE(dtype_from_code(7).has_value());
}

TEST_CASE("bfloat16 conversion rounds to nearest even and keeps NaN and infinities") {
  CHECK(to_bfloat16(1.0f).bits == 0x3f80);
  CHECK(to_float(to_bfloat16(-2.5f)) == -2.5f);  // representable: exact
  // 1 + 2^-8 lies half-way between 1 and 1 + 2^-7: ties go to the even mantissa (1.0).
  CHECK(to_float(to_bfloat16(1.0f + 0x1p-8f)) == 1.0f);
  // 1 + 3 * 2^-8 lies half-way between 1 + 2^-7 and 1 + 2^-6: ties to even gives 1 + 2^-6.
  CHECK(to_float(to_bfloat16(1.0f + 3 * 0x1p-8f)) == 1.0f + 0x1p-6f);
  CHECK(to_float(to_bfloat16(1.0f + 0x1p-8f + 0x1p-20f)) == 1.0f + 0x1p-7f);  // above half-way: up
  CHECK(std::isnan(to_float(to_bfloat16(std::numeric_limits<float>::quiet_NaN()))));
  CHECK(std::isnan(to_float(to_bfloat16(bits_to_float(0x7f800001u)))));  // a NaN whose payload rounding would
                                                                         // turn into infinity stays NaN
  CHECK(to_float(to_bfloat16(std::numeric_limits<float>::infinity())) == std::numeric_limits<float>::infinity());
  CHECK(to_bfloat16(3.4e38f).bits == 0x7f80);  // rounds past the largest bfloat16: infinity, as IEEE rounding does

  // The buffer conversions (vectorised loops, Note [conversions]) equal the scalar ones on every element:
  // random values, then every kind of special pattern (an odd count, so the loops' tails run too).
  tensor x = random_tensor({1003}, 3);
  const std::uint32_t specials[] = {0x7f800001u, 0xffc12345u, 0x7fffffffu, 0x7f800000u, 0xff800000u,
                                    0x3f808000u, 0x3f818000u, 0xbf808000u, 0x00000001u, 0x00408000u,
                                    0x807fffffu, 0x7f7fffffu, 0xff7f8000u, 0x00000000u, 0x80000000u};
  for (std::size_t i = 0; i < 300; ++i) x.data()[i * 3] = bits_to_float(specials[i % std::size(specials)]);
  std::vector<bfloat16> b(x.size());
  to_bfloat16(x.data(), b.data(), x.size());
  std::vector<float> back(x.size());
  to_float(b.data(), back.data(), x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    REQUIRE(b[i].bits == to_bfloat16(x.data()[i]).bits);
    const float scalar_back = to_float(b[i]);
    REQUIRE(std::memcmp(&back[i], &scalar_back, sizeof(float)) == 0);
    if (i % 3 != 0 || i >= 900)  // random values: within half an 8-bit ulp
      CHECK(std::fabs(back[i] - x.data()[i]) <= std::fabs(x.data()[i]) * 0x1p-8f);
  }
}

TEST_CASE("a tensor carries its dtype: astype, fill, equality, and data() refuses the wrong dtype") {
  tensor x = from_values({2, 3}, {1.0f, -2.0f, 0.5f, 3.0f, 1.0f + 0x1p-8f, 0.0f});
  CHECK(x.type() == dtype::float32);
  CHECK(x.byte_size() == 24);
  const tensor b = x.astype(dtype::bfloat16);
  CHECK(b.type() == dtype::bfloat16);
  CHECK(b.shape() == x.shape());
  CHECK(b.byte_size() == 12);
  CHECK(b.bf16_data()[1].bits == to_bfloat16(-2.0f).bits);
  const tensor back = b.astype(dtype::float32);
  CHECK(back.data()[4] == 1.0f);  // rounded once, on the way to bfloat16
  CHECK(back.data()[0] == 1.0f);
  CHECK(b != x);                  // another dtype is another tensor
  CHECK(b == x.astype(dtype::bfloat16));

  CHECK(contains(error_of([&] { b.data(); }), "expected a float32 tensor, got bfloat16 (2, 3)"));
  CHECK(contains(error_of([&] { x.bf16_data(); }), "expected a bfloat16 tensor, got float32 (2, 3)"));

  tensor z = zeros({4}, dtype::bfloat16);
  CHECK(z.bf16_data()[3].bits == 0);
  z.fill(2.0f);
  CHECK(to_float(z.bf16_data()[0]) == 2.0f);
  CHECK(contains(error_of([&] { z.reshape({3}); }), "cannot take shape (3)"));
}

TEST_CASE("tensor memory: aligned, deep copies, moves are free, assignment reuses a block that fits") {
  tensor a = random_tensor({5, 7}, 1);
  CHECK(reinterpret_cast<std::uintptr_t>(a.data()) % 64 == 0);
  tensor copy = a;
  CHECK(copy == a);
  CHECK(copy.data() != a.data());
  copy.data()[0] += 1.0f;
  CHECK(copy != a);

  const float* block = a.data();
  tensor moved = std::move(a);
  CHECK(moved.data() == block);
  CHECK(a.size() == 0);  // NOLINT: the moved-from tensor is empty, shape (0)

  tensor target = random_tensor({5, 7}, 2);
  const float* kept = target.data();
  target = moved;
  CHECK(target.data() == kept);  // same byte size: the block is reused (layer caches rely on it)
  CHECK(target == moved);

  const tensor scalar;  // like xtensor: a 0-d tensor with one element
  CHECK(scalar.dimension() == 0);
  CHECK(scalar.size() == 1);
}

TEST_CASE("tensor bytes: every block counted while it lives, the peak kept until reset (Note [tensor bytes])") {
  const std::uint64_t start = tensor_bytes_in_use();
  reset_tensor_bytes_peak();
  CHECK(tensor_bytes_peak() == start);
  {
    tensor big = tensor::from_shape({1000, 1000});  // 4,000,000 bytes and the block's margin
    CHECK(tensor_bytes_in_use() >= start + 4000000);
    CHECK(tensor_bytes_in_use() <= start + 4000000 + 4096);
    {
      const tensor copy = big;  // a deep copy: a second block
      CHECK(tensor_bytes_in_use() >= start + 8000000);
    }
    CHECK(tensor_bytes_in_use() < start + 4000000 + 4096);
    tensor moved = std::move(big);  // a move takes the block: nothing new
    CHECK(tensor_bytes_in_use() < start + 4000000 + 4096);
  }
  CHECK(tensor_bytes_in_use() == start);
  CHECK(tensor_bytes_peak() >= start + 8000000);  // the copy's moment
  reset_tensor_bytes_peak();
  CHECK(tensor_bytes_peak() == start);
}

#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)  // a sanitizer's allocator ignores mallopt
TEST_CASE("keep_tensor_memory: a large tensor freed and made again is not faulted in again") {
  // 96 MB is above glibc's largest mmap threshold (32 MB), so without keep_tensor_memory
  // each such tensor is a fresh mapping, 24,576 pages faulted in every time it is made (Note [keep the heap]).
  keep_tensor_memory();
  const auto faults = [] {
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    return usage.ru_minflt;
  };
  const std::size_t floats = (std::size_t{96} << 20) / sizeof(float);
  const auto make_and_touch = [&] {
    tensor t = tensor::from_shape({floats});
    for (std::size_t i = 0; i < floats; i += 1024) t.data()[i] = 1.0f;  // every 4 KB page
    return t.data()[floats - 1024];
  };
  std::vector<long> counts;  // page faults of each tensor made in turn (all reused: Note [aligned blocks])
  for (int i = 0; i < 4; ++i) {
    const long before = faults();
    CHECK(make_and_touch() == 1.0f);
    counts.push_back(faults() - before);
  }
  MESSAGE("page faults of each tensor: " << counts[0] << ", " << counts[1] << ", " << counts[2] << ", " << counts[3]);
  if (counts[0] > 10000)  // else the system backs the heap with huge pages: nothing to tell apart
    for (std::size_t i = 1; i < counts.size(); ++i) CHECK(counts[i] < counts[0] / 10);
}
#endif

TEST_CASE("rank-3 tensors stay rank 3: rows, cols, slice_rows in both dtypes") {
  const tensor x = random_tensor({4, 3, 5}, 7);  // (batch, sequence, features)
  CHECK(rows(x) == 12);
  CHECK(cols(x) == 5);
  const tensor part = slice_rows(x, 1, 3);
  CHECK(part.shape() == shape_t{2, 3, 5});
  CHECK(std::memcmp(part.data(), x.data() + 15, 30 * sizeof(float)) == 0);
  const tensor b = x.astype(dtype::bfloat16);
  const tensor bpart = slice_rows(b, 1, 3);
  CHECK(bpart.type() == dtype::bfloat16);
  CHECK(bpart == part.astype(dtype::bfloat16));
}

TEST_CASE("element access by indices, right-aligned as in xtensor") {
  tensor x = from_values({2, 3}, {0, 1, 2, 3, 4, 5});
  CHECK(x(1, 2) == 5);
  CHECK(x(0, 1) == 1);
  CHECK(x(2) == 2);        // one index: the last axis, row 0
  CHECK(x(7, 1, 0) == 3);  // a surplus leading index is ignored
  x(1, 0) = 9;
  CHECK(x.data()[3] == 9);
}

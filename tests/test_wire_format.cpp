// How tensors cross a process boundary: shape, dtype and elements as one raw block, refused when corrupt.
#include <doctest/doctest.h>

#include <cstdint>
#include <vector>

#include <caf/binary_deserializer.hpp>
#include <caf/binary_serializer.hpp>

#include "network/wire_format.hpp"
#include "test_support.hpp"

using namespace ap;
using namespace ap::test;

namespace {

std::vector<char> to_wire(tensor x) {
  std::vector<char> buffer;
  caf::binary_serializer sink{nullptr, buffer};
  REQUIRE(!wire_tensor(sink, x));
  return buffer;
}

}  // namespace

TEST_CASE("the wire format carries shape and dtype: float32 and bfloat16, rank 3, byte for byte") {
  for (dtype type : {dtype::float32, dtype::bfloat16}) {
    INFO(dtype_name(type));
    const tensor x = random_tensor({2, 3, 4}, 11).astype(type);
    const std::vector<char> buffer = to_wire(x);
    caf::binary_deserializer source{nullptr, buffer};
    tensor y;
    REQUIRE(!wire_tensor(source, y));
    CHECK(y == x);
    CHECK(y.type() == type);
    CHECK(y.shape() == shape_t{2, 3, 4});
  }
  // bfloat16 halves the payload.
  const tensor x = random_tensor({64, 64}, 12);
  CHECK(to_wire(x.astype(dtype::bfloat16)).size() + 64 * 64 * 2 == to_wire(x).size());
}

TEST_CASE("the wire format refuses an unknown dtype code instead of guessing") {
  std::vector<char> buffer;
  {
    caf::binary_serializer sink{nullptr, buffer};
    std::vector<std::uint64_t> shape{2};
    std::uint8_t code = 9;
    std::size_t n = 2;
    REQUIRE(!sink(shape, code));
    REQUIRE(!sink.begin_sequence(n));
  }
  caf::binary_deserializer source{nullptr, buffer};
  tensor y;
  const caf::error err = wire_tensor(source, y);
  REQUIRE(err);
  CHECK(contains(caf::to_string(err), "unknown dtype code 9"));
}


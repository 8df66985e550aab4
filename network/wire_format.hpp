// How a tensor crosses a process boundary: its shape and dtype, then its elements as one raw block
// (little-endian), several times faster than element-wise serialisation.
#pragma once

#include <cstdint>
#include <type_traits>
#include <vector>

#include <caf/deserializer.hpp>
#include <caf/error.hpp>
#include <caf/sec.hpp>
#include <caf/serializer.hpp>

#include "tensor/tensor.hpp"

namespace ap {

// True for CAF's binary (de)serialisers, false for inspectors that only print (to_string).
template <class Inspector>
struct is_wire_inspector
    : std::bool_constant<std::is_same<Inspector, caf::serializer>::value ||
                         std::is_same<Inspector, caf::deserializer>::value> {};

caf::error wire_tensor(caf::serializer& sink, tensor& x);
// Bytes of tensor elements of `type` this process has serialised for the network so far, on any thread.
std::uint64_t wire_tensor_bytes_sent(dtype type);
caf::error wire_tensor(caf::deserializer& source, tensor& x);
caf::error wire_tensors(caf::serializer& sink, std::vector<tensor>& xs);
caf::error wire_tensors(caf::deserializer& source, std::vector<tensor>& xs);

}  // namespace ap

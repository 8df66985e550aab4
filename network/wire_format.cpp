#include "network/wire_format.hpp"

#include <atomic>
#include <cstdint>

namespace ap {

namespace {
std::atomic<std::uint64_t> bytes_sent[dtype_count];
}  // namespace

std::uint64_t wire_tensor_bytes_sent(dtype type) { return bytes_sent[static_cast<std::size_t>(type)].load(); }

caf::error wire_tensor(caf::serializer& sink, tensor& x) {
  bytes_sent[static_cast<std::size_t>(x.type())] += x.byte_size();
  std::vector<std::uint64_t> shape(x.shape().begin(), x.shape().end());
  std::uint8_t type = static_cast<std::uint8_t>(x.type());
  std::size_t n = x.size();
  return caf::error::eval([&] { return sink(shape, type); }, [&] { return sink.begin_sequence(n); },
                          [&] { return n > 0 ? sink.apply_raw(x.byte_size(), x.bytes()) : caf::none; },
                          [&] { return sink.end_sequence(); });
}

caf::error wire_tensor(caf::deserializer& source, tensor& x) {
  std::vector<std::uint64_t> shape;
  std::uint8_t code = 0;
  if (auto err = source(shape, code)) return err;
  const std::optional<dtype> type = dtype_from_code(code);
  if (!type)
    return caf::make_error(caf::sec::invalid_argument, "tensor of unknown dtype code " + std::to_string(code));
  x = tensor::from_shape(shape_t(shape.begin(), shape.end()), *type);
  std::size_t n = 0;
  return caf::error::eval([&] { return source.begin_sequence(n); },
                          [&]() -> caf::error {
                            if (n != x.size()) return caf::make_error(caf::sec::invalid_argument,
                                                                      "tensor payload does not match its shape");
                            return n > 0 ? source.apply_raw(x.byte_size(), x.bytes()) : caf::none;
                          },
                          [&] { return source.end_sequence(); });
}

caf::error wire_tensors(caf::serializer& sink, std::vector<tensor>& xs) {
  std::size_t n = xs.size();
  if (auto err = sink.begin_sequence(n)) return err;
  for (auto& x : xs)
    if (auto err = wire_tensor(sink, x)) return err;
  return sink.end_sequence();
}

caf::error wire_tensors(caf::deserializer& source, std::vector<tensor>& xs) {
  std::size_t n = 0;
  if (auto err = source.begin_sequence(n)) return err;
  xs.resize(n);
  for (auto& x : xs)
    if (auto err = wire_tensor(source, x)) return err;
  return source.end_sequence();
}

}  // namespace ap

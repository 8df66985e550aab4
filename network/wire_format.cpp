#include "network/wire_format.hpp"

#include <cstdint>

namespace ap {

caf::error wire_tensor(caf::serializer& sink, tensor& x) {
  std::vector<std::uint64_t> shape(x.shape().begin(), x.shape().end());
  std::size_t n = x.size();
  return caf::error::eval([&] { return sink(shape); }, [&] { return sink.begin_sequence(n); },
                          [&] { return n > 0 ? sink.apply_raw(n * sizeof(float), x.data()) : caf::none; },
                          [&] { return sink.end_sequence(); });
}

caf::error wire_tensor(caf::deserializer& source, tensor& x) {
  std::vector<std::uint64_t> shape;
  if (auto err = source(shape)) return err;
  x = tensor::from_shape(shape_t(shape.begin(), shape.end()));
  std::size_t n = 0;
  return caf::error::eval([&] { return source.begin_sequence(n); },
                          [&]() -> caf::error {
                            if (n != x.size()) return caf::make_error(caf::sec::invalid_argument,
                                                                      "tensor payload does not match its shape");
                            return n > 0 ? source.apply_raw(n * sizeof(float), x.data()) : caf::none;
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

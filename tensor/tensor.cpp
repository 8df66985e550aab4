#include "tensor/tensor.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <stdexcept>

namespace ap {

tensor zeros(const shape_t& shape) {
  tensor t = tensor::from_shape(shape);
  std::fill(t.begin(), t.end(), 0.0f);
  return t;
}

tensor from_values(const shape_t& shape, const std::vector<float>& values) {
  tensor t = tensor::from_shape(shape);
  if (t.size() != values.size())
    throw std::invalid_argument("from_values: shape " + shape_string(shape) + " holds " +
                                std::to_string(t.size()) + " elements, got " +
                                std::to_string(values.size()));
  std::copy(values.begin(), values.end(), t.begin());
  return t;
}

std::size_t cols(const tensor& t) { return t.dimension() == 0 ? 1 : t.shape().back(); }

std::size_t rows(const tensor& t) {
  const std::size_t c = cols(t);
  return c == 0 ? 0 : t.size() / c;
}

shape_t shape_of(const tensor& t) { return shape_t(t.shape().begin(), t.shape().end()); }

std::string shape_string(const shape_t& shape) {
  std::ostringstream os;
  os << '(';
  for (std::size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << ')';
  return os.str();
}

std::string shape_string(const tensor& t) { return shape_string(shape_of(t)); }

tensor slice_rows(const tensor& t, std::size_t begin, std::size_t end) {
  if (t.dimension() == 0 || begin > end || end > t.shape()[0])
    throw std::out_of_range("slice_rows: rows [" + std::to_string(begin) + ", " + std::to_string(end) +
                            ") of a tensor of shape " + shape_string(t));
  shape_t shape = shape_of(t);
  const std::size_t row_size = shape[0] == 0 ? 0 : t.size() / shape[0];
  shape[0] = end - begin;
  tensor out = tensor::from_shape(shape);
  std::copy(t.data() + begin * row_size, t.data() + end * row_size, out.data());
  return out;
}

float max_relative_difference(const tensor& a, const tensor& b) {
  if (a.shape() != b.shape())
    throw std::invalid_argument("max_relative_difference: shapes " + shape_string(a) + " and " +
                                shape_string(b) + " differ");
  float worst = 0.0f;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const float x = a.data()[i], y = b.data()[i];
    const float d = std::fabs(x - y) / std::max({1.0f, std::fabs(x), std::fabs(y)});
    if (std::isnan(d)) return d;
    worst = std::max(worst, d);
  }
  return worst;
}

}  // namespace ap

#include <malloc.h>

namespace ap {

void keep_tensor_memory() {
  mallopt(M_MMAP_THRESHOLD, 64 << 20);   // blocks below 64 MB come from the heap, not fresh mmaps
  mallopt(M_TRIM_THRESHOLD, 1 << 30);    // and the heap is not trimmed back until 1 GB is free
}

}  // namespace ap

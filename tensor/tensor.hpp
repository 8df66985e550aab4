// The tensor type of the project: float32, row-major, any rank, on xtensor.
#pragma once

#include <cstddef>
#include <initializer_list>
#include <string>
#include <vector>

#include <xtensor/xarray.hpp>

namespace ap {

// Any rank; layers treat the last axis as features and every leading axis as rows (see rows()/cols()),
// so a (batch, features) matrix and a later (batch, time, features) tensor both work.
using tensor = xt::xarray<float>;
using shape_t = std::vector<std::size_t>;

// A zero-filled tensor of the given shape.
tensor zeros(const shape_t& shape);
inline tensor zeros(std::initializer_list<std::size_t> shape) { return zeros(shape_t(shape)); }

// A tensor with the given shape whose elements are copied from `values` (sizes must agree).
tensor from_values(const shape_t& shape, const std::vector<float>& values);

// Leading axes flattened: the number of rows a layer sees. A 0-d tensor has one row.
std::size_t rows(const tensor& t);
// The last axis: the number of features. A 0-d tensor has one column.
std::size_t cols(const tensor& t);

shape_t shape_of(const tensor& t);
// "(32, 784)": used in every error message that names a shape.
std::string shape_string(const tensor& t);
std::string shape_string(const shape_t& shape);

// Rows [begin, end) of a tensor, as a new tensor (leading axis only).
tensor slice_rows(const tensor& t, std::size_t begin, std::size_t end);

// Largest |a - b| / max(1, |a|, |b|) over all elements; shapes must agree.
float max_relative_difference(const tensor& a, const tensor& b);

}  // namespace ap

namespace ap {

// Keeps freed tensor memory in the process instead of returning it to the OS after every step (which
// costs thousands of page faults per step on large models). Call once at program start.
void keep_tensor_memory();

}  // namespace ap

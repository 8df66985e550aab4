// The tensor type of the project: a row-major block of one dtype (float32 or bfloat16), any rank.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "tensor/bfloat16.hpp"
#include "tensor/dtype.hpp"

namespace ap {

using shape_t = std::vector<std::size_t>;

// Note [tensor]: a tensor owns its elements (a copy is deep, a move is free) in one 64-byte-aligned block, read as
// raw bytes by oneDNN, safetensors and the wire. Layers treat the last axis as features and the leading axes as
// rows. float32 is what layers compute in; bfloat16 holds GEMM inputs and what travels or is stored.
class tensor {
 public:
  using shape_type = shape_t;
  using value_type = float;

  // A 0-d float32 tensor with one element (as xtensor's default): a valid scalar.
  tensor();
  explicit tensor(float value);
  tensor(const tensor& other);
  tensor(tensor&& other) noexcept;
  tensor& operator=(const tensor& other);  // keeps this tensor's block when it has room (caches reuse buffers)
  tensor& operator=(tensor&& other) noexcept;
  ~tensor() = default;

  static tensor from_shape(const shape_t& shape, dtype type = dtype::float32);
  static tensor from_shape(std::initializer_list<std::size_t> shape, dtype type = dtype::float32) {
    return from_shape(shape_t(shape), type);
  }
  template <class Shape>
  static tensor from_shape(const Shape& shape, dtype type = dtype::float32) {
    return from_shape(shape_t(shape.begin(), shape.end()), type);
  }

  dtype type() const { return type_; }
  const shape_t& shape() const { return shape_; }
  std::size_t dimension() const { return shape_.size(); }
  std::size_t size() const { return size_; }
  std::size_t byte_size() const { return size_ * dtype_size(type_); }

  // float32 elements; throws std::logic_error naming the dtype and shape for a bfloat16 tensor.
  float* data() { return ++version_, float_data(); }
  const float* data() const { return float_data(); }
  float* begin() { return data(); }
  float* end() { return data() + size_; }
  const float* begin() const { return data(); }
  const float* end() const { return data() + size_; }
  // bfloat16 elements; throws std::logic_error for a float32 tensor.
  bfloat16* bf16_data() { return ++version_, bf16_block(); }
  const bfloat16* bf16_data() const { return bf16_block(); }
  // The elements as bytes, whatever the dtype.
  std::byte* bytes() { return ++version_, block_.get(); }
  const std::byte* bytes() const { return block_.get(); }
  // Changes whenever the elements may have changed; a derived copy (a Linear's bf16 weights, Note [compute
  // dtype]) is remade when the version it was made from differs. Not atomic: one writer at a time.
  std::uint64_t version() const { return version_; }

  // A float32 element by its indices (tests, small loops); as in xtensor, fewer indices address the last axes.
  template <class... Index>
  float& operator()(Index... index) {
    return data()[offset_of({static_cast<std::size_t>(index)...})];
  }
  template <class... Index>
  const float& operator()(Index... index) const {
    return data()[offset_of({static_cast<std::size_t>(index)...})];
  }

  // Every element set to `value` (rounded for bfloat16).
  void fill(float value);
  // The same elements under another shape with the same element count; throws naming both shapes.
  void reshape(const shape_t& shape);
  // Becomes an uninitialised tensor of this shape and dtype, keeping its block when it has room.
  void reset(const shape_t& shape, dtype type);
  // A converted copy (float32 <-> bfloat16 round to nearest even); the same dtype gives a plain copy.
  tensor astype(dtype type) const;

  // Same dtype, same shape, same elements (bitwise for bfloat16, == for float32).
  bool operator==(const tensor& other) const;
  bool operator!=(const tensor& other) const { return !(*this == other); }

 private:
  struct free_block {
    void operator()(std::byte* p) const;
  };
  float* float_data() const;
  bfloat16* bf16_block() const;
  void allocate(std::size_t bytes);
  std::size_t offset_of(std::initializer_list<std::size_t> index) const;

  shape_t shape_;
  std::size_t size_ = 1;
  dtype type_ = dtype::float32;
  std::unique_ptr<std::byte[], free_block> block_;
  std::size_t capacity_ = 0;  // bytes in block_
  std::uint64_t version_ = 0;
};

// Element-wise float32 arithmetic, for tests, examples and optimizer-side code (layers call kernels).
// Tensor-tensor forms require equal shapes and throw naming both.
tensor operator+(const tensor& a, const tensor& b);
tensor operator-(const tensor& a, const tensor& b);
tensor operator*(const tensor& a, const tensor& b);
tensor operator+(const tensor& a, float s);
tensor operator-(const tensor& a, float s);
tensor operator*(const tensor& a, float s);
inline tensor operator+(float s, const tensor& a) { return a + s; }
inline tensor operator*(float s, const tensor& a) { return a * s; }
tensor operator-(const tensor& a);
tensor& operator+=(tensor& a, const tensor& b);
tensor& operator-=(tensor& a, const tensor& b);
tensor& operator+=(tensor& a, float s);
tensor& operator*=(tensor& a, float s);

// `in` converted to `type` into `out`, reusing out's block when it has room (out = in.astype(type)).
void assign_as(tensor& out, const tensor& in, dtype type);

tensor zeros(const shape_t& shape, dtype type = dtype::float32);
inline tensor zeros(std::initializer_list<std::size_t> shape, dtype type = dtype::float32) {
  return zeros(shape_t(shape), type);
}

// A float32 tensor of `shape` holding `values` (sizes must agree).
tensor from_values(const shape_t& shape, const std::vector<float>& values);

// Leading axes flattened: the number of rows a layer sees. A 0-d tensor has one row.
std::size_t rows(const tensor& t);
// The last axis: the number of features. A 0-d tensor has one column.
std::size_t cols(const tensor& t);

shape_t shape_of(const tensor& t);
// "(32, 784)", as every error message names a shape.
std::string shape_string(const tensor& t);
std::string shape_string(const shape_t& shape);
// "bfloat16 (32, 784)": shape and dtype.
std::string describe(const tensor& t);

// Rows [begin, end) of a tensor, as a new tensor (any rank, any dtype).
tensor slice_rows(const tensor& t, std::size_t begin, std::size_t end);
// The parts stacked along the leading axis (slice_rows' inverse); same dtype and trailing axes, else
// std::invalid_argument naming the part and both shapes.
tensor concat_rows(const std::vector<const tensor*>& parts);

// Largest |a - b| / max(1, |a|, |b|) over all elements; shapes must agree; bfloat16 is compared as float.
float max_relative_difference(const tensor& a, const tensor& b);

// Keeps freed tensor memory in the process instead of returning it to the OS after every step. Call once at
// program start, before any computing thread starts.

// Note [one malloc arena]: glibc gives each allocating thread its own arena of heaps, unmapped as soon as one is
// free, so a stage's thread faulted its heaps in anew every step. One arena (Note [keep the heap]) serves every
// thread instead; tensors are few and large, so its lock is rarely contended.

// Note [keep the heap]: a step frees its activations at the end of the backward; a trimmed heap would fault them
// in again the next step. So the heap is never trimmed (M_TRIM_THRESHOLD -1) and every block comes from it
// (M_MMAP_MAX 0: glibc unmaps mmap'd blocks when freed); the process keeps its peak, reached every step anyway.
void keep_tensor_memory();

// Hands the heap's free pages back to the OS now (malloc_trim), before a resident-memory measurement.
void return_free_memory();

}  // namespace ap

#include "tensor/tensor.hpp"

#include "tensor/elementwise.hpp"
#include "tensor/tensor_memory.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <malloc.h>
#include <new>
#include <sstream>
#include <stdexcept>

namespace ap {

namespace {

constexpr std::size_t block_alignment = 64;  // a cache line and an AVX-512 register

std::size_t element_count(const shape_t& shape) {
  std::size_t n = 1;
  for (std::size_t d : shape) n *= d;
  return n;
}

}  // namespace

// Note [aligned blocks]: a block is malloc'd with room to start on a 64-byte boundary, the shift kept in the byte
// before it. Not aligned_alloc: glibc's split chunks are not reused for the next request of the same size.
void tensor::free_block::operator()(std::byte* p) const {
  std::byte* raw = p - static_cast<unsigned char>(p[-1]);
  count_tensor_bytes_freed(malloc_usable_size(raw));
  std::free(raw);
}

void tensor::allocate(std::size_t bytes) {
  if (bytes <= capacity_ && block_) return;
  // A zero-size tensor still gets a block (data() != null).
  const std::size_t rounded = std::max<std::size_t>(block_alignment, (bytes + block_alignment - 1) /
                                                                        block_alignment * block_alignment);
  auto* raw = static_cast<std::byte*>(std::malloc(rounded + block_alignment));
  if (!raw) throw std::bad_alloc();
  count_tensor_bytes_allocated(malloc_usable_size(raw));
  const std::size_t shift = block_alignment - reinterpret_cast<std::uintptr_t>(raw) % block_alignment;  // 1..64
  std::byte* p = raw + shift;
  p[-1] = static_cast<std::byte>(shift);
  block_.reset(p);
  capacity_ = rounded;
}

tensor::tensor() {
  allocate(dtype_size(type_));
  *data() = 0.0f;
}

tensor::tensor(float value) : tensor() { *data() = value; }

tensor::tensor(const tensor& other)
    : shape_(other.shape_), size_(other.size_), type_(other.type_), version_(other.version_ + 1) {
  allocate(other.byte_size());
  copy_bytes(block_.get(), other.block_.get(), other.byte_size());  // Note [parallel tensor copies]
}

tensor::tensor(tensor&& other) noexcept
    : shape_(std::move(other.shape_)), size_(other.size_), type_(other.type_), block_(std::move(other.block_)),
      capacity_(other.capacity_), version_(other.version_ + 1) {
  // The moved-from tensor is left empty, shape (0): valid, and visibly not the old value.
  other.shape_ = {0};
  other.size_ = 0;
  other.capacity_ = 0;
}

tensor& tensor::operator=(const tensor& other) {
  if (this == &other) return *this;
  allocate(other.byte_size());
  shape_ = other.shape_;
  size_ = other.size_;
  type_ = other.type_;
  version_ = std::max(version_, other.version_) + 1;
  copy_bytes(block_.get(), other.block_.get(), other.byte_size());
  return *this;
}

tensor& tensor::operator=(tensor&& other) noexcept {
  if (this == &other) return *this;
  shape_ = std::move(other.shape_);
  size_ = other.size_;
  type_ = other.type_;
  block_ = std::move(other.block_);
  capacity_ = other.capacity_;
  version_ = std::max(version_, other.version_) + 1;
  ++other.version_;
  other.shape_ = {0};
  other.size_ = 0;
  other.capacity_ = 0;
  return *this;
}

tensor tensor::from_shape(const shape_t& shape, dtype type) {
  tensor t;
  t.shape_ = shape;
  t.size_ = element_count(shape);
  t.type_ = type;
  t.allocate(t.byte_size());
  return t;
}

float* tensor::float_data() const {
  if (type_ != dtype::float32)
    throw std::logic_error("expected a float32 tensor, got " + describe(*this));
  return reinterpret_cast<float*>(block_.get());
}

bfloat16* tensor::bf16_block() const {
  if (type_ != dtype::bfloat16)
    throw std::logic_error("expected a bfloat16 tensor, got " + describe(*this));
  return reinterpret_cast<bfloat16*>(block_.get());
}

std::size_t tensor::offset_of(std::initializer_list<std::size_t> index) const {
  // Right-aligned against the axes: index k of n addresses axis dimension() - n + k.
  const std::size_t n = index.size();
  const std::size_t skip = n > shape_.size() ? n - shape_.size() : 0;
  const std::size_t first_axis = shape_.size() + skip - n;
  std::size_t offset = 0;
  auto it = index.begin() + skip;
  for (std::size_t a = 0; a < shape_.size(); ++a) offset = offset * shape_[a] + (a < first_axis ? 0 : *it++);
  return offset;
}

void tensor::fill(float value) {
  if (type_ == dtype::float32) {
    std::fill(data(), data() + size_, value);
  } else {
    std::fill(bf16_data(), bf16_data() + size_, to_bfloat16(value));
  }
}

void tensor::reshape(const shape_t& shape) {
  if (element_count(shape) != size_)
    throw std::invalid_argument("reshape: a tensor of shape " + shape_string(shape_) + " (" + std::to_string(size_) +
                                " elements) cannot take shape " + shape_string(shape));
  shape_ = shape;
}

void tensor::reset(const shape_t& shape, dtype type) {
  const std::size_t n = element_count(shape);
  allocate(n * dtype_size(type));
  shape_ = shape;
  size_ = n;
  type_ = type;
  ++version_;
}

void assign_as(tensor& out, const tensor& in, dtype type) {
  if (type == in.type()) {
    out = in;
    return;
  }
  out.reset(in.shape(), type);
  if (type == dtype::bfloat16)
    to_bfloat16(in.data(), out.bf16_data(), in.size());
  else
    to_float(in.bf16_data(), out.data(), in.size());
}

tensor tensor::astype(dtype type) const {
  if (type == type_) return *this;
  tensor out = from_shape(shape_, type);
  if (type == dtype::bfloat16)
    to_bfloat16(data(), out.bf16_data(), size_);
  else
    to_float(bf16_data(), out.data(), size_);
  return out;
}

bool tensor::operator==(const tensor& other) const {
  if (type_ != other.type_ || shape_ != other.shape_) return false;
  if (size_ == 0) return true;
  if (type_ == dtype::bfloat16) return std::memcmp(bytes(), other.bytes(), byte_size()) == 0;
  return std::equal(data(), data() + size_, other.data());
}

namespace {

void check_same_shape(const tensor& a, const tensor& b, const char* op) {
  if (a.shape() != b.shape())
    throw std::invalid_argument(std::string("tensor ") + op + ": shapes " + shape_string(a) + " and " +
                                shape_string(b) + " differ");
}

template <class F>
tensor map(const tensor& a, F f) {
  tensor out = tensor::from_shape(a.shape());
  const float* pa = a.data();
  float* po = out.data();
  for (std::size_t i = 0; i < a.size(); ++i) po[i] = f(pa[i]);
  return out;
}

template <class F>
tensor zip(const tensor& a, const tensor& b, const char* op, F f) {
  check_same_shape(a, b, op);
  tensor out = tensor::from_shape(a.shape());
  const float *pa = a.data(), *pb = b.data();
  float* po = out.data();
  for (std::size_t i = 0; i < a.size(); ++i) po[i] = f(pa[i], pb[i]);
  return out;
}

}  // namespace

tensor operator+(const tensor& a, const tensor& b) { return zip(a, b, "+", [](float x, float y) { return x + y; }); }
tensor operator-(const tensor& a, const tensor& b) { return zip(a, b, "-", [](float x, float y) { return x - y; }); }
tensor operator*(const tensor& a, const tensor& b) { return zip(a, b, "*", [](float x, float y) { return x * y; }); }
tensor operator+(const tensor& a, float s) { return map(a, [s](float x) { return x + s; }); }
tensor operator-(const tensor& a, float s) { return map(a, [s](float x) { return x - s; }); }
tensor operator*(const tensor& a, float s) { return map(a, [s](float x) { return x * s; }); }
tensor operator-(const tensor& a) { return map(a, [](float x) { return -x; }); }

tensor& operator+=(tensor& a, const tensor& b) {
  check_same_shape(a, b, "+=");
  float* pa = a.data();
  const float* pb = b.data();
  for (std::size_t i = 0; i < a.size(); ++i) pa[i] += pb[i];
  return a;
}

tensor& operator-=(tensor& a, const tensor& b) {
  check_same_shape(a, b, "-=");
  float* pa = a.data();
  const float* pb = b.data();
  for (std::size_t i = 0; i < a.size(); ++i) pa[i] -= pb[i];
  return a;
}

tensor& operator+=(tensor& a, float s) {
  for (float& x : a) x += s;
  return a;
}

tensor& operator*=(tensor& a, float s) {
  for (float& x : a) x *= s;
  return a;
}

tensor zeros(const shape_t& shape, dtype type) {
  tensor t = tensor::from_shape(shape, type);
  parallel_zero(t.bytes(), t.byte_size());  // +0.0 in both dtypes
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

shape_t shape_of(const tensor& t) { return t.shape(); }

std::string shape_string(const shape_t& shape) {
  std::ostringstream os;
  os << '(';
  for (std::size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << ')';
  return os.str();
}

std::string shape_string(const tensor& t) { return shape_string(t.shape()); }

std::string describe(const tensor& t) { return std::string(dtype_name(t.type())) + " " + shape_string(t); }

tensor slice_rows(const tensor& t, std::size_t begin, std::size_t end) {
  if (t.dimension() == 0 || begin > end || end > t.shape()[0])
    throw std::out_of_range("slice_rows: rows [" + std::to_string(begin) + ", " + std::to_string(end) +
                            ") of a tensor of shape " + shape_string(t));
  shape_t shape = t.shape();
  const std::size_t row_bytes = shape[0] == 0 ? 0 : t.byte_size() / shape[0];
  shape[0] = end - begin;
  tensor out = tensor::from_shape(shape, t.type());
  if (end > begin && row_bytes > 0) parallel_copy(out.bytes(), t.bytes() + begin * row_bytes, (end - begin) * row_bytes);
  return out;
}

tensor concat_rows(const std::vector<const tensor*>& parts) {
  if (parts.empty()) throw std::invalid_argument("concat_rows: no parts");
  const tensor& first = *parts.front();
  if (first.dimension() == 0) throw std::invalid_argument("concat_rows: part 0 is a 0-d tensor (no rows)");
  shape_t shape = first.shape();
  shape[0] = 0;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    const tensor& p = *parts[i];
    shape_t trailing = p.shape();
    if (p.dimension() > 0) trailing[0] = shape[0];
    if (p.type() != first.type() || p.dimension() == 0 || trailing != shape)
      throw std::invalid_argument("concat_rows: part " + std::to_string(i) + " is " + describe(p) +
                                  ", part 0 is " + describe(first) + ": only the leading axis may differ");
    shape[0] += p.shape()[0];
  }
  tensor out = tensor::from_shape(shape, first.type());
  std::vector<copy_piece> pieces;  // every part's bytes, in one team (Note [op threads] in elementwise.hpp)
  std::size_t offset = 0;
  for (const tensor* p : parts) {
    pieces.push_back({out.bytes() + offset, p->bytes(), p->byte_size()});
    offset += p->byte_size();
  }
  parallel_copy(pieces);
  return out;
}

float max_relative_difference(const tensor& a, const tensor& b) {
  if (a.shape() != b.shape())
    throw std::invalid_argument("max_relative_difference: shapes " + shape_string(a) + " and " +
                                shape_string(b) + " differ");
  // Only a bfloat16 side is widened; a float32 side is read in place.
  tensor wa, wb;
  const tensor& fa = a.type() == dtype::float32 ? a : (wa = a.astype(dtype::float32));
  const tensor& fb = b.type() == dtype::float32 ? b : (wb = b.astype(dtype::float32));
  float worst = 0.0f;
  for (std::size_t i = 0; i < fa.size(); ++i) {
    const float x = fa.data()[i], y = fb.data()[i];
    const float d = std::fabs(x - y) / std::max({1.0f, std::fabs(x), std::fabs(y)});
    if (std::isnan(d)) return d;
    worst = std::max(worst, d);
  }
  return worst;
}

}  // namespace ap

#include <malloc.h>

namespace ap {

void return_free_memory() { malloc_trim(0); }

void keep_tensor_memory() {
  mallopt(M_MMAP_MAX, 0);                // every block comes from the heap, none from a fresh mmap
  mallopt(M_TRIM_THRESHOLD, -1);         // and the heap is never trimmed: Note [keep the heap]
  mallopt(M_ARENA_MAX, 1);               // one heap for every thread: Note [one malloc arena]
}

}  // namespace ap

#include "data/npy.hpp"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <stdexcept>

namespace ap {

namespace {

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw std::runtime_error("npy file " + path + ": " + what);
}

// The header's dict literal: string keys; values a string, True/False or a tuple of integers.
class header_parser {
 public:
  header_parser(const std::string& text, std::size_t offset, const std::string& path)
      : s_(text), base_(offset), path_(path) {}

  void parse(std::string& descr, bool& fortran, std::vector<std::size_t>& shape) {
    bool have_descr = false, have_fortran = false, have_shape = false;
    expect('{');
    for (;;) {
      skip();
      if (peek() == '}') break;
      const std::string key = string_literal();
      expect(':');
      skip();
      if (key == "descr") {
        descr = string_literal();
        have_descr = true;
      } else if (key == "fortran_order") {
        fortran = boolean();
        have_fortran = true;
      } else if (key == "shape") {
        shape = tuple();
        have_shape = true;
      } else {
        error("unknown key '" + key + "'");
      }
      skip();
      if (peek() == ',') ++i_;
      else if (peek() != '}') error("expected ',' or '}'");
    }
    if (!have_descr) error("the header has no 'descr'");
    if (!have_fortran) error("the header has no 'fortran_order'");
    if (!have_shape) error("the header has no 'shape'");
  }

 private:
  [[noreturn]] void error(const std::string& what) {
    fail(path_, "bad header at byte " + std::to_string(base_ + i_) + ": " + what);
  }
  void skip() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n')) ++i_;
  }
  char peek() {
    if (i_ >= s_.size()) error("the dict ends early");
    return s_[i_];
  }
  void expect(char c) {
    skip();
    if (peek() != c) error(std::string("expected '") + c + "', found '" + s_[i_] + "'");
    ++i_;
  }
  std::string string_literal() {
    const char quote = peek();
    if (quote != '\'' && quote != '"') error("expected a quoted string");
    const std::size_t end = s_.find(quote, i_ + 1);
    if (end == std::string::npos) error("unterminated string");
    std::string v = s_.substr(i_ + 1, end - i_ - 1);
    i_ = end + 1;
    return v;
  }
  bool boolean() {
    if (s_.compare(i_, 4, "True") == 0) return i_ += 4, true;
    if (s_.compare(i_, 5, "False") == 0) return i_ += 5, false;
    error("expected True or False");
  }
  std::vector<std::size_t> tuple() {
    std::vector<std::size_t> v;
    expect('(');
    for (;;) {
      skip();
      if (peek() == ')') break;
      if (peek() < '0' || peek() > '9') error("expected a non-negative integer dimension");
      std::size_t d = 0;
      while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') {
        if (d > (SIZE_MAX - 9) / 10) error("dimension too large");
        d = d * 10 + std::size_t(s_[i_++] - '0');
      }
      v.push_back(d);
      skip();
      if (peek() == ',') ++i_;
      else if (peek() != ')') error("expected ',' or ')' in the shape");
    }
    ++i_;
    return v;
  }

  const std::string& s_;
  std::size_t base_, i_ = 0;
  const std::string& path_;
};

std::size_t element_bytes(npy_dtype t) {
  switch (t) {
    case npy_dtype::uint8: return 1;
    case npy_dtype::float32: case npy_dtype::int32: return 4;
    default: return 8;
  }
}

std::string shape_text(const std::vector<std::size_t>& shape) {
  std::string s = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + (shape.size() == 1 ? ",)" : ")");
}

}  // namespace

std::size_t npy_array::elements() const {
  std::size_t n = 1;
  for (std::size_t d : shape) n *= d;
  return n;
}

double npy_array::at(std::size_t i) const {
  const unsigned char* p = data.data() + i * element_bytes(type);
  switch (type) {
    case npy_dtype::uint8: return *p;
    case npy_dtype::float32: { float v; std::memcpy(&v, p, 4); return v; }
    case npy_dtype::float64: { double v; std::memcpy(&v, p, 8); return v; }
    case npy_dtype::int32: { std::int32_t v; std::memcpy(&v, p, 4); return double(v); }
    default: { std::int64_t v; std::memcpy(&v, p, 8); return double(v); }
  }
}

npy_array read_npy(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, "cannot open (missing or unreadable)");
  std::vector<unsigned char> file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) fail(path, "read error");
  if (file.empty()) fail(path, "empty (0 bytes)");
  static const unsigned char magic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
  if (file.size() < 10 || std::memcmp(file.data(), magic, 6) != 0)
    fail(path, "bad magic at byte 0: not a NumPy .npy file (expected \\x93NUMPY)");
  const unsigned major = file[6], minor = file[7];
  if (major < 1 || major > 3 || minor != 0)
    fail(path, "unsupported format version " + std::to_string(major) + "." + std::to_string(minor) +
                   " at byte 6 (1.0, 2.0 and 3.0 are read)");
  std::size_t header_len = 0, header_start = 0;
  if (major == 1) {
    header_len = std::size_t(file[8]) | std::size_t(file[9]) << 8;
    header_start = 10;
  } else {
    if (file.size() < 12) fail(path, "truncated: the file ends inside the header length at byte 8");
    header_len = std::size_t(file[8]) | std::size_t(file[9]) << 8 | std::size_t(file[10]) << 16 |
                 std::size_t(file[11]) << 24;
    header_start = 12;
  }
  if (file.size() < header_start + header_len)
    fail(path, "truncated: the header of " + std::to_string(header_len) + " bytes at byte " +
                   std::to_string(header_start) + " ends past the file's " + std::to_string(file.size()) + " bytes");
  const std::string header(file.begin() + std::ptrdiff_t(header_start),
                           file.begin() + std::ptrdiff_t(header_start + header_len));
  npy_array a;
  a.path = path;
  bool fortran = false;
  header_parser(header, header_start, path).parse(a.descr, fortran, a.shape);
  if (a.descr == "<f4") a.type = npy_dtype::float32;
  else if (a.descr == "<f8") a.type = npy_dtype::float64;
  else if (a.descr == "|u1" || a.descr == "<u1") a.type = npy_dtype::uint8;
  else if (a.descr == "<i4") a.type = npy_dtype::int32;
  else if (a.descr == "<i8") a.type = npy_dtype::int64;
  else
    fail(path, "dtype '" + a.descr + "' is not supported (little-endian float32 '<f4', float64 '<f8', uint8 '|u1', "
               "int32 '<i4', int64 '<i8')");
  if (fortran) fail(path, "fortran_order is True: only C order is read (np.ascontiguousarray before np.save)");
  a.data_offset = header_start + header_len;
  std::size_t n = 1;
  for (std::size_t d : a.shape) {
    if (d != 0 && n > SIZE_MAX / d / 8) fail(path, "shape " + shape_text(a.shape) + " overflows");
    n *= d;
  }
  const std::size_t expected = n * element_bytes(a.type), got = file.size() - a.data_offset;
  if (got != expected)
    fail(path, std::string(got < expected ? "truncated" : "trailing bytes") + ": shape " + shape_text(a.shape) +
                   " of " + a.descr + " needs " + std::to_string(expected) + " bytes after the header at byte " +
                   std::to_string(a.data_offset) + ", the file holds " + std::to_string(got));
  a.data.assign(file.begin() + std::ptrdiff_t(a.data_offset), file.end());
  return a;
}

dataset npy_dataset(const std::string& features_path, const std::string& labels_path, std::size_t classes) {
  const npy_array x = read_npy(features_path);
  if (x.shape.empty()) fail(features_path, "rank 0 (a scalar): features need a shape (samples, features...)");
  const npy_array y = read_npy(labels_path);
  if (y.shape.size() != 1)
    fail(labels_path, "labels of shape " + shape_text(y.shape) + ": expected rank 1, (samples,)");
  const std::size_t n = x.shape[0];
  if (y.shape[0] != n)
    throw std::runtime_error("npy files " + features_path + " and " + labels_path + " differ in length: " +
                             std::to_string(n) + " feature rows but " + std::to_string(y.shape[0]) + " labels");
  dataset d;
  d.name = features_path;
  shape_t shape(x.shape.begin(), x.shape.end());
  if (shape.size() == 1) shape.push_back(1);
  d.inputs = tensor::from_shape(shape);
  d.labels = tensor::from_shape({n});
  const std::size_t row = n == 0 ? 0 : x.elements() / n;
  float* in = d.inputs.data();
  for (std::size_t i = 0; i < x.elements(); ++i) {
    const float v = static_cast<float>(x.at(i));
    if (!std::isfinite(v))
      fail(features_path, "feature " + std::to_string(x.at(i)) + " at row " + std::to_string(i / row) + ", column " +
                              std::to_string(i % row) + " is not finite" +
                              (std::isfinite(x.at(i)) ? " as float32" : ""));
    in[i] = v;
  }
  std::size_t largest = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const double v = y.at(i);
    if (!(v >= 0) || v != std::floor(v) || v >= 16777216.0)
      fail(labels_path, "label " + std::to_string(v) + " at index " + std::to_string(i) +
                            " is not a class id (a non-negative integer below 2^24)");
    const std::size_t label = static_cast<std::size_t>(v);
    if (classes != 0 && label >= classes)
      fail(labels_path, "label " + std::to_string(label) + " at index " + std::to_string(i) +
                            " is not below the model's " + std::to_string(classes) + " classes");
    largest = std::max(largest, label);
    d.labels.data()[i] = static_cast<float>(label);
  }
  d.num_classes = classes != 0 ? classes : (n == 0 ? 0 : largest + 1);
  return d;
}

std::shared_ptr<const data_source> npy_source(const std::string& features_path, const std::string& labels_path,
                                              std::size_t classes) {
  return memory_source(npy_dataset(features_path, labels_path, classes));
}

}  // namespace ap

#include "data/fashion_mnist.hpp"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <type_traits>

namespace ap {

namespace {

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw std::runtime_error(path + ": " + what);
}

struct gz_closer {
  void operator()(gzFile f) const { gzclose(f); }
};
using gz_handle = std::unique_ptr<std::remove_pointer_t<gzFile>, gz_closer>;

// Throws if zlib recorded an error on `f`: a truncated gzip stream (Z_BUF_ERROR) shows only here, so this runs
// after every read.
void check_gz(gzFile f, const std::string& path) {
  int errnum = Z_OK;
  const char* message = gzerror(f, &errnum);
  if (errnum == Z_OK) return;
  if (errnum == Z_ERRNO) fail(path, std::string("read error: ") + std::strerror(errno));
  if (errnum == Z_BUF_ERROR) fail(path, std::string("truncated gzip stream: ") + message);
  fail(path, std::string("corrupt gzip stream: ") + message);
}

// Reads up to n bytes (fewer only at the end); throws on a zlib error.
std::size_t read_up_to(gzFile f, const std::string& path, unsigned char* dst, std::size_t n) {
  std::size_t got = 0;
  while (got < n) {
    const unsigned chunk = static_cast<unsigned>(std::min<std::size_t>(n - got, 1u << 30));
    const int r = gzread(f, dst + got, chunk);
    check_gz(f, path);
    if (r <= 0) break;
    got += static_cast<std::size_t>(r);
  }
  return got;
}

std::string hex_bytes(const unsigned char* b, std::size_t n) {
  std::string s;
  char buf[4];
  for (std::size_t i = 0; i < n; ++i) {
    std::snprintf(buf, sizeof buf, "%s%02x", i ? " " : "", b[i]);
    s += buf;
  }
  return s;
}

std::string dims_string(const std::vector<std::size_t>& dims) {
  std::string s;
  for (std::size_t i = 0; i < dims.size(); ++i) s += (i ? "x" : "") + std::to_string(dims[i]);
  return s;
}

}  // namespace

// IDX: magic 00 00 <type> <ndims>, ndims big-endian uint32 sizes, then the elements. gzread passes non-gzip
// files through, so raw and .gz files take the same path.
idx_file read_idx(const std::string& path) {
  errno = 0;
  gz_handle file(gzopen(path.c_str(), "rb"));
  if (!file) fail(path, std::string("cannot open: ") + (errno ? std::strerror(errno) : "out of memory"));
  gzFile f = file.get();
  gzbuffer(f, 1u << 20);

  unsigned char magic[4];
  const std::size_t got_magic = read_up_to(f, path, magic, 4);
  if (got_magic < 4)
    fail(path, "truncated: file ends inside the 4-byte IDX magic (got " + std::to_string(got_magic) +
                   " bytes)");
  if (magic[0] != 0 || magic[1] != 0 || magic[3] == 0)
    fail(path, "bad magic: expected 00 00 08 <ndims>, got " + hex_bytes(magic, 4) + " (not an IDX file)");
  if (magic[2] != 0x08)
    fail(path, "bad magic: element type 0x" + hex_bytes(magic + 2, 1) +
                   " is not supported (only 0x08, unsigned bytes)");

  const std::size_t ndims = magic[3];
  std::vector<unsigned char> header(4 * ndims);
  const std::size_t got_header = read_up_to(f, path, header.data(), header.size());
  if (got_header < header.size())
    fail(path, "truncated: expected " + std::to_string(header.size()) + " bytes of dimensions for " +
                   std::to_string(ndims) + " dims, got " + std::to_string(got_header));

  idx_file idx;
  std::size_t expected = 1;
  for (std::size_t i = 0; i < ndims; ++i) {
    const unsigned char* b = header.data() + 4 * i;
    const std::size_t dim = (std::size_t{b[0]} << 24) | (std::size_t{b[1]} << 16) |
                            (std::size_t{b[2]} << 8) | std::size_t{b[3]};
    idx.dims.push_back(dim);
    if (dim != 0 && expected > SIZE_MAX / dim)
      fail(path, "bad header: dims " + dims_string(idx.dims) + " overflow");
    expected *= dim;
  }

  // Chunked reads grow the buffer only as bytes arrive, so a header promising more than the file holds costs no
  // huge allocation.
  constexpr std::size_t chunk = std::size_t{64} << 20;
  std::size_t got = 0;
  while (got < expected) {
    const std::size_t want = std::min(expected - got, chunk);
    idx.bytes.resize(got + want);
    const std::size_t r = read_up_to(f, path, idx.bytes.data() + got, want);
    got += r;
    if (r < want) break;
  }
  if (got < expected)
    fail(path, "truncated: expected " + std::to_string(expected) + " bytes of data for dims " +
                   dims_string(idx.dims) + ", got " + std::to_string(got));

  // One more byte must not exist; this read also makes zlib check the gzip trailer.
  unsigned char extra[1];
  if (read_up_to(f, path, extra, 1) != 0)
    fail(path, "trailing garbage: more than the " + std::to_string(expected) + " bytes of data that dims " +
                   dims_string(idx.dims) + " promise");
  return idx;
}

dataset load_fashion_mnist(const std::string& split, const std::string& dir) {
  std::string prefix;
  if (split == "train")
    prefix = "train";
  else if (split == "test")
    prefix = "t10k";
  else
    throw std::invalid_argument("load_fashion_mnist: unknown split '" + split +
                                "' (expected \"train\" or \"test\")");
  const std::string images_path = (std::filesystem::path(dir) / (prefix + "-images-idx3-ubyte.gz")).string();
  const std::string labels_path = (std::filesystem::path(dir) / (prefix + "-labels-idx1-ubyte.gz")).string();
  constexpr std::size_t num_classes = 10;

  const idx_file images = read_idx(images_path);
  if (images.dims.size() != 3 || images.dims[1] != 28 || images.dims[2] != 28)
    fail(images_path, "expected images of shape (n, 28, 28), got dims " + dims_string(images.dims));
  const idx_file labels = read_idx(labels_path);
  if (labels.dims.size() != 1)
    fail(labels_path, "expected labels of shape (n), got dims " + dims_string(labels.dims));
  const std::size_t n = images.dims[0];
  if (labels.dims[0] != n)
    throw std::runtime_error("count mismatch: " + images_path + " holds " + std::to_string(n) +
                             " images but " + labels_path + " holds " + std::to_string(labels.dims[0]) +
                             " labels");

  dataset d;
  d.name = "fashion-mnist/" + split;
  d.num_classes = num_classes;
  const std::size_t features = 28 * 28;
  d.inputs = tensor::from_shape({n, features});
  d.labels = tensor::from_shape({n});
  const unsigned char* px = images.bytes.data();
  float* out = d.inputs.data();
  const std::size_t total = n * features;
  for (std::size_t i = 0; i < total; ++i) out[i] = static_cast<float>(px[i]) / 255.0f;
  for (std::size_t i = 0; i < n; ++i) {
    const unsigned char label = labels.bytes[i];
    if (label >= num_classes)
      fail(labels_path, "bad label " + std::to_string(label) + " at index " + std::to_string(i) +
                            " (expected 0.." + std::to_string(num_classes - 1) + ")");
    d.labels.data()[i] = static_cast<float>(label);
  }
  return d;
}

}  // namespace ap

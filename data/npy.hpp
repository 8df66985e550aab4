// NumPy .npy files (format versions 1.0, 2.0 and 3.0): a small header parser of our own, C order only.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "data/data_source.hpp"

namespace ap {

enum class npy_dtype { float32, float64, uint8, int32, int64 };

struct npy_array {
  std::string path;
  npy_dtype type = npy_dtype::float32;
  std::string descr;                // as the header gives it, e.g. "<f4"
  std::vector<std::size_t> shape;   // () for a scalar
  std::vector<unsigned char> data;  // product(shape) elements, little-endian
  std::size_t data_offset = 0;      // where the payload starts in the file
  std::size_t elements() const;
  double at(std::size_t i) const;   // element i as a double (exact for every supported dtype below 2^53)
};

// Reads and checks `path` (magic, version, header dict, a supported little-endian dtype, C order, payload
// length). Throws std::runtime_error naming the file and what is wrong (with the byte offset for header errors).
npy_array read_npy(const std::string& path);

// A classification source from a features file (n, d...) and a labels file (n) of integer class ids. Features
// become float32 and must be finite; labels must be non-negative, below `classes` when it is not 0 (else
// num_classes is the largest + 1). Throws std::runtime_error naming the file and the row.
std::shared_ptr<const data_source> npy_source(const std::string& features_path, const std::string& labels_path,
                                              std::size_t classes = 0);

// The float32 features and labels checked as npy_source does, for sources built from other files.
dataset npy_dataset(const std::string& features_path, const std::string& labels_path, std::size_t classes = 0);

}  // namespace ap

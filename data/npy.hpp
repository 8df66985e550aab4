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

// Reads and checks `path`: magic, version, the header's dict literal {'descr': ..., 'fortran_order': ...,
// 'shape': (...)}, a supported little-endian dtype, C order, and the payload's length against the shape.
// Throws std::runtime_error naming the file and what is wrong (with the byte offset for header errors).
npy_array read_npy(const std::string& path);

// A classification source from a features file (n, d...) and a labels file (n) of integer class ids:
// features become float32 (n, d...) and must be finite (a NaN or Inf is refused naming its row and column);
// labels must be non-negative integers, below `classes` when it is not 0 (else num_classes is the largest
// label + 1). Throws std::runtime_error naming the file for any mismatch.
std::shared_ptr<const data_source> npy_source(const std::string& features_path, const std::string& labels_path,
                                              std::size_t classes = 0);

// The float32 features and labels checked as npy_source does, for sources built from other files.
dataset npy_dataset(const std::string& features_path, const std::string& labels_path, std::size_t classes = 0);

}  // namespace ap

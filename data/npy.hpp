// NumPy .npy files (versions 1.0-3.0), C order only; the header parser is our own.
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
  std::string descr;  // e.g. "<f4"
  std::vector<std::size_t> shape;
  std::vector<unsigned char> data;  // product(shape) elements, little-endian
  std::size_t data_offset = 0;
  std::size_t elements() const;
  double at(std::size_t i) const;  // exact for every supported dtype below 2^53
};

// Reads and checks `path`. Throws std::runtime_error naming the file and what is wrong (with the byte offset
// for header errors).
npy_array read_npy(const std::string& path);

// A classification source from a features file (n, d...) and a labels file (n) of integer class ids. Features
// become float32 and must be finite; labels must be non-negative, below `classes` when it is not 0 (else
// num_classes is the largest + 1). Throws std::runtime_error naming the file and the row.
std::shared_ptr<const data_source> npy_source(const std::string& features_path, const std::string& labels_path,
                                              std::size_t classes = 0);

// The float32 features and labels checked as npy_source does.
dataset npy_dataset(const std::string& features_path, const std::string& labels_path, std::size_t classes = 0);

}  // namespace ap

// Fashion-MNIST from the IDX gzip files of Debian's dataset-fashion-mnist package.
#pragma once

#include <string>

#include "data/dataset.hpp"

namespace ap {

inline const char* default_fashion_mnist_dir = "/usr/share/datasets/fashion-mnist";

// split "train" (60000) or "test" (10000); images (n, 784) scaled to [0, 1], labels 0..9. Throws
// std::runtime_error naming the file for a missing, truncated or corrupt file.
dataset load_fashion_mnist(const std::string& split, const std::string& dir = default_fashion_mnist_dir);

// One IDX file (gzip or raw): its dimensions and bytes.
struct idx_file {
  std::vector<std::size_t> dims;
  std::vector<unsigned char> bytes;  // product(dims) bytes (type 0x08)
};
idx_file read_idx(const std::string& path);

}  // namespace ap

// Files of the formats users bring, written for tests (numpy itself where it can), and the batch-by-batch
// comparison of two data sources.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "data/data_source.hpp"
#include "test_support.hpp"

namespace ap::test {

// Runs numpy code (Debian's python3-numpy) with `d` the scratch folder's path.
inline void numpy(const scratch_dir& dir, const std::string& code) {
  std::ofstream(dir.file("write.py")) << "import numpy as np\nd = '" << dir.path.string() << "/'\n" << code << "\n";
  REQUIRE(std::system(("/usr/bin/python3 " + dir.file("write.py")).c_str()) == 0);
}

// A raw token file as nanoGPT writes one (np.array(ids, T).tofile): `bytes` as little-endian T; returns `path`.
template <typename T>
std::string write_tokens(const std::string& path, const std::vector<std::uint8_t>& bytes) {
  std::vector<T> tokens(bytes.begin(), bytes.end());
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(tokens.data()), std::streamsize(tokens.size() * sizeof(T)));
  return path;
}

// Whether `a` and `b` have the same size, classes and sample shape and give the same batches of one epoch order.
inline bool same_batches(const data_source& a, const data_source& b, std::uint64_t seed, std::size_t batch_size) {
  if (a.size() != b.size() || a.num_classes() != b.num_classes() || a.sample_shape() != b.sample_shape()) return false;
  const sample_order order(a.size(), seed, 0);
  for (std::size_t i = 0; i < batch_count(a.size(), batch_size); ++i) {
    const batch x = gather_batch(a, order, i, batch_size), y = gather_batch(b, order, i, batch_size);
    if (!(x.inputs == y.inputs) || !(x.labels == y.labels)) return false;
  }
  return true;
}

}  // namespace ap::test

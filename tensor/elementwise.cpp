#include "tensor/elementwise.hpp"

#include <algorithm>
#include <cstring>
#include <vector>

#include "tensor/compute.hpp"

namespace ap {
namespace {

// Bytes per piece of a parallel copy: at least this much per thread, else one memcpy.
constexpr std::size_t piece_bytes = std::size_t(1) << 18;

}  // namespace

void add_into(float* y, const float* x, std::size_t n) {
  const auto count = static_cast<std::ptrdiff_t>(n);
#pragma omp parallel for simd schedule(static) if (count >= parallel_elements)
  for (std::ptrdiff_t i = 0; i < count; ++i) y[i] += x[i];
}

void parallel_copy(void* to, const void* from, std::size_t bytes) {
  const auto pieces = static_cast<std::ptrdiff_t>((bytes + piece_bytes - 1) / piece_bytes);
  if (pieces < 2) {
    if (bytes) std::memcpy(to, from, bytes);
    return;
  }
  char* t = static_cast<char*>(to);
  const char* f = static_cast<const char*>(from);
#pragma omp parallel for schedule(static)
  for (std::ptrdiff_t p = 0; p < pieces; ++p) {
    const std::size_t begin = std::size_t(p) * piece_bytes, end = std::min(bytes, begin + piece_bytes);
    std::memcpy(t + begin, f + begin, end - begin);
  }
}

void copy_bytes(void* to, const void* from, std::size_t bytes) {
  if (is_compute_rank_thread())
    parallel_copy(to, from, bytes);
  else if (bytes)
    std::memcpy(to, from, bytes);
}

void parallel_copy(const std::vector<copy_piece>& copies) {
  std::vector<copy_piece> pieces;
  std::size_t total = 0;
  for (const copy_piece& c : copies) {
    for (std::size_t b = 0; b < c.bytes; b += piece_bytes)
      pieces.push_back({static_cast<char*>(c.to) + b, static_cast<const char*>(c.from) + b,
                        std::min(piece_bytes, c.bytes - b)});
    total += c.bytes;
  }
  const auto count = static_cast<std::ptrdiff_t>(pieces.size());
#pragma omp parallel for schedule(static) if (total >= 2 * piece_bytes)
  for (std::ptrdiff_t p = 0; p < count; ++p)
    std::memcpy(pieces[std::size_t(p)].to, pieces[std::size_t(p)].from, pieces[std::size_t(p)].bytes);
}

void fill_rows(float* y, std::size_t rows, const float* row, std::size_t cols) {
  const auto count = static_cast<std::ptrdiff_t>(rows);
#pragma omp parallel for schedule(static) if (std::ptrdiff_t(rows * cols) >= parallel_elements)
  for (std::ptrdiff_t r = 0; r < count; ++r) std::memcpy(y + std::size_t(r) * cols, row, cols * sizeof(float));
}

void add_to_rows(float* y, std::size_t rows, const float* row, std::size_t cols) {
  const auto count = static_cast<std::ptrdiff_t>(rows);
#pragma omp parallel for schedule(static) if (std::ptrdiff_t(rows * cols) >= parallel_elements)
  for (std::ptrdiff_t r = 0; r < count; ++r) {  // not add_into: a parallel region per row costs more than the row
    float* yr = y + std::size_t(r) * cols;
    for (std::size_t i = 0; i < cols; ++i) yr[i] += row[i];
  }
}

void add_row_block_sums(std::size_t rows, std::size_t cols, std::size_t parts,
                        const std::function<void(std::size_t, float*)>& add_row, float* const* sums) {
  const std::size_t blocks = (rows + row_sum_block - 1) / row_sum_block, width = parts * cols;
  std::vector<float> partial(blocks * width, 0.0f);
  const bool parallel = std::ptrdiff_t(rows * cols) >= parallel_elements;
  const auto block_count = static_cast<std::ptrdiff_t>(blocks);
#pragma omp parallel for schedule(static) if (parallel)
  for (std::ptrdiff_t b = 0; b < block_count; ++b) {
    const std::size_t end = std::min(rows, (std::size_t(b) + 1) * row_sum_block);
    for (std::size_t r = std::size_t(b) * row_sum_block; r < end; ++r) add_row(r, partial.data() + std::size_t(b) * width);
  }
  const auto columns = static_cast<std::ptrdiff_t>(width);
#pragma omp parallel for schedule(static) if (parallel)
  for (std::ptrdiff_t col = 0; col < columns; ++col) {
    float sum = 0.0f;
    for (std::size_t b = 0; b < blocks; ++b) sum += partial[b * width + std::size_t(col)];
    sums[std::size_t(col) / cols][std::size_t(col) % cols] += sum;
  }
}

void add_column_sums(const float* x, std::size_t rows, std::size_t cols, float* sums) {
  add_row_block_sums(
      rows, cols, 1,
      [&](std::size_t r, float* partial) {
        const float* xr = x + r * cols;
        for (std::size_t i = 0; i < cols; ++i) partial[i] += xr[i];
      },
      &sums);
}

void parallel_zero(void* to, std::size_t bytes) {
  const auto pieces = static_cast<std::ptrdiff_t>((bytes + piece_bytes - 1) / piece_bytes);
  if (pieces < 2 || !is_compute_rank_thread()) {  // no team on another thread (Note [parallel tensor copies])
    if (bytes) std::memset(to, 0, bytes);
    return;
  }
  char* t = static_cast<char*>(to);
#pragma omp parallel for schedule(static)
  for (std::ptrdiff_t p = 0; p < pieces; ++p) {
    const std::size_t begin = std::size_t(p) * piece_bytes, end = std::min(bytes, begin + piece_bytes);
    std::memset(t + begin, 0, end - begin);
  }
}

namespace {

// One block's sum of squares: 8 running sums (lane j takes elements j, j + 8, ...), added in a fixed order,
// then the tail. The same arithmetic wherever the block lies in memory.
double block_square_sum(const float* x, std::size_t n) {
  double lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  const std::size_t full = n / 8 * 8;
  for (std::size_t i = 0; i < full; i += 8)
    for (std::size_t j = 0; j < 8; ++j) lane[j] += double(x[i + j]) * double(x[i + j]);
  double sum = ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
  for (std::size_t i = full; i < n; ++i) sum += double(x[i]) * double(x[i]);
  return sum;
}

}  // namespace

std::vector<double> square_sums(const std::vector<float_span>& arrays) {
  // Every block of every array, in array order: (array, first element).
  std::vector<std::pair<std::size_t, std::size_t>> blocks;
  std::size_t total_elements = 0;
  for (std::size_t a = 0; a < arrays.size(); ++a) {
    for (std::size_t begin = 0; begin < arrays[a].size; begin += sum_block) blocks.emplace_back(a, begin);
    total_elements += arrays[a].size;
  }
  std::vector<double> block_sums(blocks.size());
  const auto count = static_cast<std::ptrdiff_t>(blocks.size());
#pragma omp parallel for schedule(static) if (total_elements >= std::size_t(parallel_elements))
  for (std::ptrdiff_t b = 0; b < count; ++b) {
    const auto [a, begin] = blocks[std::size_t(b)];
    block_sums[std::size_t(b)] = block_square_sum(arrays[a].data + begin, std::min(sum_block, arrays[a].size - begin));
  }
  // Added as square_sum adds them: one block alone is the array's sum; more start from 0 in block order.
  std::vector<double> sums(arrays.size(), 0.0);
  std::vector<std::size_t> blocks_of(arrays.size(), 0);
  for (const auto& b : blocks) ++blocks_of[b.first];
  for (std::size_t b = 0; b < blocks.size(); ++b) {
    const std::size_t a = blocks[b].first;
    sums[a] = blocks_of[a] == 1 ? block_sums[b] : sums[a] + block_sums[b];
  }
  return sums;
}

double square_sum(const float* x, std::size_t n) {
  const std::size_t blocks = (n + sum_block - 1) / sum_block;
  if (blocks <= 1) return n ? block_square_sum(x, n) : 0.0;
  thread_local std::vector<double> sums;
  sums.assign(blocks, 0.0);
  double* s = sums.data();
  const auto count = static_cast<std::ptrdiff_t>(blocks);
#pragma omp parallel for schedule(static) if (n >= std::size_t(parallel_elements))
  for (std::ptrdiff_t b = 0; b < count; ++b) {
    const std::size_t begin = std::size_t(b) * sum_block;
    s[b] = block_square_sum(x + begin, std::min(sum_block, n - begin));
  }
  double total = 0.0;
  for (std::size_t b = 0; b < blocks; ++b) total += s[b];
  return total;
}

}  // namespace ap

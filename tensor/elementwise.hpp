// Element-wise loops and copies on the calling thread's compute threads.

// Note [op threads]: every op outside oneDNN runs on the calling thread's OpenMP team, split so any thread count
// gives the same bits: element-wise and per-row work in static blocks; sums over rows by blocks of rows (Note
// [row-block sums]); sums to one number per fixed sum_block block, and the loss per row, added in order.

// Note [oneDNN primitives against the loops]: layer norm's backward stays in loops, since oneDNN's dgamma/dbeta
// bits follow the thread count; the causal softmax too, since oneDNN's own exp would change every trained bit.
#pragma once

#include <cstddef>
#include <functional>
#include <utility>
#include <vector>

#include <omp.h>

namespace ap {

// Elements per block of a blocked sum to one number: Note [op threads].
inline constexpr std::size_t sum_block = 1 << 13;

// Inside `#pragma omp parallel`: the calling thread's contiguous share [begin, end) of `count` items.
inline std::pair<std::size_t, std::size_t> thread_share(std::size_t count) {
  const auto t = static_cast<std::size_t>(omp_get_thread_num()), n = static_cast<std::size_t>(omp_get_num_threads());
  return {count * t / n, count * (t + 1) / n};
}

// y[i] += x[i] for i < n.
void add_into(float* y, const float* x, std::size_t n);
// memcpy on the compute threads (large copies only; a small one is one memcpy).
void parallel_copy(void* to, const void* from, std::size_t bytes);

// Note [parallel tensor copies]: a tensor copy runs on the team only on a thread made a compute rank; any other
// thread (CAF's, a test's) would open a team of every core, so it copies with one memcpy.
bool is_compute_rank_thread();
// memcpy, on the calling rank's threads where is_compute_rank_thread().
void copy_bytes(void* to, const void* from, std::size_t bytes);
// Several copies (a microbatch join's parts) in one team: each split into pieces, all pieces shared out.
struct copy_piece {
  void* to;
  const void* from;
  std::size_t bytes;
};
void parallel_copy(const std::vector<copy_piece>& copies);
// memset(to, 0, bytes), as copy_bytes.
void parallel_zero(void* to, std::size_t bytes);
// Sum of x[i]^2 in double, per sum_block block, added in order: same bits for any thread count.
double square_sum(const float* x, std::size_t n);
// Each array's square_sum, in one parallel loop over every array's blocks.
struct float_span {
  const float* data;
  std::size_t size;
};
std::vector<double> square_sums(const std::vector<float_span>& arrays);

// Each of `rows` rows of y (`cols` floats each) set to `row`.
void fill_rows(float* y, std::size_t rows, const float* row, std::size_t cols);
// `row` added to each of `rows` rows of y.
void add_to_rows(float* y, std::size_t rows, const float* row, std::size_t cols);

// Note [row-block sums]: a sum over the rows into one vector goes in two passes: each block of row_sum_block rows
// adds its rows in order into its own partial (blocks spread over threads), then every column adds the partials
// in block order. The blocks depend on the row count alone, so the bits do not depend on the threads.
// `add_row(r, partials)` adds row r's terms into `parts` partials of `cols` floats; sums[p][i] += part p's total.
inline constexpr std::size_t row_sum_block = 256;
void add_row_block_sums(std::size_t rows, std::size_t cols, std::size_t parts,
                        const std::function<void(std::size_t, float*)>& add_row, float* const* sums);

// sums[i] += the sum of column i of x (`rows` x `cols`), by Note [row-block sums].
void add_column_sums(const float* x, std::size_t rows, std::size_t cols, float* sums);

}  // namespace ap

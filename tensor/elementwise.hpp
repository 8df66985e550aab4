// Element-wise loops and copies on the calling thread's compute threads (Note [op threads]).

// Note [op threads]: every op outside oneDNN runs on the calling thread's OpenMP team (set_compute_threads in
// compute.hpp): a pipeline stage's one thread runs it serially, a single process or a threaded stage on all
// its threads. Each op is split so that any thread count gives the same bits:
//   - element-wise work (adds, conversions, optimizer updates, copies) and per-row work (layer norm, softmax,
//     cross-entropy rows) is split into contiguous static blocks; each element or row is computed alone, by
//     the same instructions, whichever thread runs it;
//   - sums over rows into one vector (a bias gradient, dgamma, dbeta) go by blocks of rows (Note [row-block
//     sums], add_row_block_sums below); the embedding gradients are split by token (token_embedding.cpp);
//   - sums to one number (the gradient norm) are taken per fixed block of sum_block elements, and the block
//     sums added in block order: the grouping depends on the sizes only, never on the threads;
//   - the cross-entropy loss keeps one value per row and adds the rows in order after the parallel loop.
// Below a few tens of thousands of elements a loop runs serially (the team's start-up, a few microseconds,
// would cost more than it saves): parallel_elements in compute.hpp.

// Note [oneDNN primitives against the loops]: measured on this 2-vCPU machine under load 8-10 (other builds;
// three interleaved runs, best of 7-9 repeats, so only large differences count): layer normalisation backward
// (8192 x 256, dx, dgamma, dbeta) on oneDNN 1.0-14 ms against 7.4-10.6 ms for the loops of
// model/layer_norm.cpp on one thread: no clear winner, and oneDNN's dgamma/dbeta sum per thread (bits
// that follow the thread count), so the loops stay. Softmax over 512 x 128 x 128 with the upper triangle set
// to -inf first, oneDNN 16-24 ms against 38-60 ms for causal_softmax_rows on one thread: faster, but another
// per-row arithmetic (its own exp), which would move every trained bit off the pinned figures; left for a
// change of its own, measured on a quiet machine. GELU forward and backward were already oneDNN's eltwise
// (tensor/nn_ops.hpp); reorders for bf16 <-> fp32 are not the same conversion (Note [conversions] in
// bfloat16.hpp); the residual add is memory-bound (a sum/binary primitive has nothing to gain over one pass).
#pragma once

#include <cstddef>
#include <functional>
#include <utility>
#include <vector>

#include <omp.h>

namespace ap {

// Elements per block of a blocked sum to one number: Note [op threads].
inline constexpr std::size_t sum_block = 1 << 13;

// Inside `#pragma omp parallel`: the calling thread's share [begin, end) of `count` items, contiguous, the
// team's shares in thread order (a static schedule written out, for loops whose parallel axis is inner).
inline std::pair<std::size_t, std::size_t> thread_share(std::size_t count) {
  const auto t = static_cast<std::size_t>(omp_get_thread_num()), n = static_cast<std::size_t>(omp_get_num_threads());
  return {count * t / n, count * (t + 1) / n};
}

// y[i] += x[i] for i < n.
void add_into(float* y, const float* x, std::size_t n);
// memcpy on the compute threads (large copies only; a small one is one memcpy).
void parallel_copy(void* to, const void* from, std::size_t bytes);

// Note [parallel tensor copies]: copying a tensor (a stash, a cached output handed to the caller) was one
// serial memcpy, the serial part that kept ReLU's and layer norm's forwards below 0.8 efficiency on 2
// threads. A copy runs on the team only on a thread that was made a compute rank (set_compute_threads,
// use_compute_cores): any other thread (CAF's workers, a test's) has OpenMP's default of every core and
// would open a team that size for a copy, so it copies with one memcpy as before.
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
// memset(to, 0, bytes) on the compute threads, where is_compute_rank_thread() (as copy_bytes): a stage's
// zero_grad may run on one of CAF's threads, whose OpenMP default would be a team of every core.
void parallel_zero(void* to, std::size_t bytes);
// Sum of x[i]^2 for i < n, in double: per sum_block block (8 running sums, added in a fixed order), the block
// sums added in order. Same bits for any thread count.
double square_sum(const float* x, std::size_t n);
// Each array's square_sum (the same bits), all computed in one parallel loop over every array's blocks: a
// model's many small gradients (a GPT's biases and LayerNorm scales) share one team instead of opening one each
// or running serially.
struct float_span {
  const float* data;
  std::size_t size;
};
std::vector<double> square_sums(const std::vector<float_span>& arrays);

// Each of `rows` rows of y (`cols` floats each) set to `row` (a bias broadcast before a product adds into y).
void fill_rows(float* y, std::size_t rows, const float* row, std::size_t cols);
// `row` added to each of `rows` rows of y.
void add_to_rows(float* y, std::size_t rows, const float* row, std::size_t cols);

// Note [row-block sums]: a sum over the rows into one vector (a bias gradient, layer norm's dgamma and dbeta)
// goes in two passes, so both read whole rows: each block of row_sum_block rows adds its rows in order into a
// partial of its own (the blocks spread over the threads), then every column adds the blocks' partials in
// block order to its sum. The blocks depend on the row count alone, never on the threads, so neither do the
// bits. (Split by column blocks instead, each thread read every row in 64-byte pieces: 0.68 efficiency on 2
// threads for layer norm's at 8192 x 256, about 1.0 this way; on one thread this way is some 7% slower.)
// `add_row(r, partials)` adds row r's terms into `parts` partial vectors of `cols` floats, laid out one after
// another; sums[p][i] += the total of part p, column i.
inline constexpr std::size_t row_sum_block = 256;
void add_row_block_sums(std::size_t rows, std::size_t cols, std::size_t parts,
                        const std::function<void(std::size_t, float*)>& add_row, float* const* sums);

// sums[i] += the sum of column i of x (`rows` x `cols`), by Note [row-block sums].
void add_column_sums(const float* x, std::size_t rows, std::size_t cols, float* sums);

}  // namespace ap

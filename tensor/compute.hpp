// Which library computes the tensor ops, and with how many threads.
// Note [compute backends]: oneDNN (the default) is the fast path, its JIT kernels picking AVX-512 and bf16 at run
// time; xtensor-blas (on OpenBLAS) is the portable reference and the tests' oracle. -DAP_COMPUTE=reference leaves
// oneDNN out; else set_compute_backend() or AP_COMPUTE=reference|onednn (read once) chooses.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace ap {

enum class compute_backend { onednn, reference };

bool onednn_available();

// The backend the ops use now: AP_COMPUTE from the environment if set, else oneDNN when built in.
compute_backend current_compute_backend();
// Chooses the backend for the whole process. Throws std::invalid_argument for oneDNN in a reference-only build.
void set_compute_backend(compute_backend backend);
std::string compute_backend_name(compute_backend backend);
// "onednn" or "reference"; throws std::invalid_argument naming the text otherwise.
compute_backend parse_compute_backend(const std::string& text);

// Threads of the ops the *calling* thread runs (OpenMP's setting is per thread). OpenBLAS stays at one thread
// (its setting is process-wide). Fewer threads than before release the idle team (Note [idle teams]).

// Note [idle teams]: libgomp lets idle team threads spin only while the threads it manages are no more than the
// cores; beyond that every region's end costs a sleep and wake-up. A thread keeps its last team until it ends, so
// set_compute_threads(n) releases the calling thread's team (omp_pause_resource) whenever n is below its setting.
void set_compute_threads(int threads);
int compute_threads();  // the calling thread's setting
// Note [serial actor threads]: the calling thread, no compute rank, runs its ops alone. OpenMP's default team of
// every core would spin on the compute ranks' cores; CAF's threads call this when they start.
void run_ops_serially();
// Note [parallel element loops]: element-wise loops outside oneDNN run as `#pragma omp parallel for simd` from
// this many elements, each element computed alone, so any thread count gives the same bits.
inline constexpr std::ptrdiff_t parallel_elements = 1 << 16;
// Note [vector sums]: without -ffast-math GCC adds a float sum in source order, one add waiting for the last.
// `#pragma omp simd reduction(+ : sum)` keeps a partial sum per lane; the order is fixed by the compiled code and a
// row is summed by one thread, so any thread count and microbatch split give the same bits.

// Note [cores per rank]: a compute rank (a single process, a stage, a tensor-parallel rank) computes on `threads`
// intra-op threads in its own OpenMP team. A rank pinned to `cores` binds its thread before its first parallel
// region; the team inherits the mask, so two ranks never time-slice one core. Empty `cores`: unpinned.
struct compute_cores {
  int threads = 1;
  std::vector<int> cores;
};
// Makes the calling thread a rank computing on `c`; cheap when it already is. Throws std::invalid_argument for
// fewer than 1 thread, std::runtime_error naming the cores the system refuses.
void use_compute_cores(const compute_cores& c);

// Every core (at least 1): a single process has no stages to share them with.
int single_process_threads();

}  // namespace ap

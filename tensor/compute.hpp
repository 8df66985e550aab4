// Which library computes the tensor ops, and with how many threads.
// Note [compute backends]: oneDNN (the default) is the fast path: its JIT kernels pick AVX-512 and bf16 at run
// time, and its brgemm serves few-row (microbatch) products well. xtensor-blas (on OpenBLAS) is the portable
// reference path: the same ops, used where oneDNN is missing and by the tests as the oracle. -DAP_COMPUTE=reference
// leaves oneDNN out; in a oneDNN build, set_compute_backend() or AP_COMPUTE=reference|onednn (read once, at the
// first op) chooses at run time.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace ap {

enum class compute_backend { onednn, reference };

// Whether this build links oneDNN (CMake -DAP_COMPUTE=onednn, the default).
bool onednn_available();

// The backend the ops use now: AP_COMPUTE from the environment if set, else oneDNN when built in.
compute_backend current_compute_backend();
// Chooses the backend for the whole process (all threads). Throws std::invalid_argument for oneDNN in a
// reference-only build.
void set_compute_backend(compute_backend backend);
std::string compute_backend_name(compute_backend backend);
// "onednn" or "reference"; throws std::invalid_argument naming the text otherwise.
compute_backend parse_compute_backend(const std::string& text);

// Threads of the ops that the *calling* thread runs (OpenMP's setting is per thread): a pipeline stage's thread
// uses its own count, a single process may use more. OpenBLAS (the reference path) stays at one thread: its
// setting is process-wide. Fewer threads than before also release the thread's idle team (Note [idle teams]).

// Note [idle teams]: libgomp lets a team's threads spin after each parallel region only while all the threads it
// manages (idle teams included) are no more than the cores; beyond that every region's end costs a futex sleep and
// wake-up. A thread keeps the team of its last parallel region until it ends, even after omp_set_num_threads(1),
// so an idle team on the main thread slows every pipeline stage beside it. So set_compute_threads(n) releases the
// calling thread's team (omp_pause_resource, OpenMP 5.0) whenever n is below its setting: a rank's threads stay
// while it computes and go when it is done.
void set_compute_threads(int threads);
int compute_threads();  // the calling thread's setting
// Note [serial actor threads]: the calling thread, which is no compute rank, runs its ops on itself alone.
// OpenMP's default on a new thread is an unpinned team of every core, whose threads would spin on the compute
// ranks' cores. CAF's threads call this when they start (configure_scheduler), so no op run there opens a team.
void run_ops_serially();
// Note [parallel element loops]: element-wise loops outside oneDNN (the optimizers, ReLU) run as
// `#pragma omp parallel for simd` from this many elements, on the calling thread's compute threads. Each element
// is computed alone by the same instructions, so any thread count gives the same bits.
inline constexpr std::ptrdiff_t parallel_elements = 1 << 16;
// Note [vector sums]: without -ffast-math GCC adds a float sum in source order, one add waiting for the last.
// `#pragma omp simd reduction(+ : sum)` keeps a partial sum per vector lane and adds the lanes at the end. The
// order is fixed by the compiled code and a row is summed whole by one thread, so any thread count and any
// microbatch split give the same bits (not the plain loop's bits).

// Note [cores per rank]: a compute rank (a single process, a stage, a tensor-parallel rank) computes on `threads`
// intra-op threads: OpenMP's team size is per thread and libgomp gives every thread its own team, so several
// ranks in one process run their teams at once. A rank pinned to `cores` binds its thread before its first
// parallel region; the team's threads inherit the mask, so two ranks never time-slice one core. Empty: unpinned.
struct compute_cores {
  int threads = 1;
  std::vector<int> cores;
};
// Makes the calling thread a rank computing on `c`; cheap when it already is (called before every action).
// Throws std::invalid_argument for fewer than 1 thread, or std::runtime_error naming the cores the system refuses.
void use_compute_cores(const compute_cores& c);

// Threads for a single process with no pipeline stages to share the cores with: every core (at least 1).
int single_process_threads();

}  // namespace ap

// Which library computes the tensor ops, and with how many threads.
// Note [compute backends]: oneDNN (the default) is the fast path: its JIT kernels pick AVX-512 and bf16 at
// run time, and its brgemm serves few-row (microbatch) products well; OpenBLAS's kernels depend on
// OPENBLAS_CORETYPE (AVX2 Haswell ones where the environment sets it, toolchain notes). xtensor-blas (on
// OpenBLAS) is the portable reference path: the same ops, used where oneDNN is missing and by the tests as
// the oracle. The build option -DAP_COMPUTE=reference leaves oneDNN out entirely; in a oneDNN build,
// set_compute_backend() or the environment variable AP_COMPUTE=reference|onednn (read once, at the first
// op) chooses at run time.
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

// Threads of the ops that the *calling* thread runs: OpenMP's setting is per thread, so each pipeline
// stage calls this with 1 on its own compute thread (the stages give the parallelism), and a single
// process may use more. OpenBLAS (the reference path) stays at one thread: its setting is process-wide.
// Fewer threads than before also let the calling thread's idle team go (Note [idle teams]).

// Note [idle teams]: libgomp lets a team's threads spin after each parallel region (300,000 rounds by default) only
// while the threads it manages, every thread's team counted, idle ones included, are no more than the cores; beyond
// that it spins 100 rounds and sleeps on a futex, so every region's end costs a sleep and a wake-up. A thread
// keeps the team of its last parallel region until it ends, even after omp_set_num_threads(1): the main thread that
// measured layer costs on 2 threads, or ran a single-process configuration of a benchmark, kept its idle threads
// beside a pipeline's stages, and on this 2-vCPU machine a one-stage pipeline on 2 threads then ran the 4-layer GPT
// at 1.65-1.71x its 1-thread rate, its two threads each switching ~1,700 times a second (1.82-1.90x with the team
// released). A stand-alone program, a stage thread running 20,000 short regions on 2 threads: 0.31 s, 0 voluntary
// switches; with the main thread's idle 2-thread team beside it 1.5 s and 19,500 (also after a 1-thread region on
// the main thread); with that team released by omp_pause_resource (OpenMP 5.0: the calling thread's resources, no
// other thread's) 0.31 s and 0. So set_compute_threads(n) releases the calling thread's team whenever n is below its
// setting: a rank's threads stay while it computes and go when it is done (a rank's own thread ending releases them
// too).
void set_compute_threads(int threads);
int compute_threads();  // the calling thread's setting
// Note [serial actor threads]: the calling thread, which is no compute rank, runs the ops it calls on itself
// alone. OpenMP's default on a new thread is a team of every core, unpinned, whose threads spin a while after
// each region on the cores that the compute ranks' pinned teams use. CAF's threads (its workers, the
// middleman's, a detached actor's until it becomes a compute rank) call this when they start
// (configure_scheduler), so no op run there (the coordinator's loss, a conversion, a copy, a stage's
// zero_grad) opens such a team.
void run_ops_serially();
// Note [parallel element loops]: element-wise loops outside oneDNN (the optimizers, ReLU) run as
// `#pragma omp parallel for simd` over this many elements or more, on the calling thread's compute threads:
// a pipeline stage's one thread runs them serially, a single process uses every core. Each element is
// computed alone, by the same instructions, so any thread count gives the same bits.
inline constexpr std::ptrdiff_t parallel_elements = 1 << 16;
// Note [vector sums]: without -ffast-math GCC adds a float sum in source order, one add waiting for the last:
// layer norm's backward and the attention softmax's backward each spent most of their time in such a loop.
// `#pragma omp simd reduction(+ : sum)` lets the loop keep a partial sum per vector lane and add the lanes at
// its end. The order is fixed by the compiled code and a row is summed whole by one thread, so any thread
// count and any split of the batch into microbatches still gives the same bits (not the plain loop's bits).

// Note [cores per rank]: a compute rank (a single process, a stage, a tensor-parallel rank, a data-parallel
// replica's stage) computes on `threads` intra-op threads: OpenMP's team size is a per-thread setting and
// libgomp gives every thread that opens a parallel region a team of its own, so several ranks in one process
// each run their own team at once (oneDNN follows the calling thread's setting). A rank pinned to `cores`
// (as many as its threads) binds its thread to them before its first parallel region; the team's threads,
// created by that thread, inherit its mask, so two ranks never time-slice one core. Empty `cores`: not pinned.
struct compute_cores {
  int threads = 1;
  std::vector<int> cores;
};
// Makes the calling thread a rank computing on `c` (threads and, if given, its cores). Cheap when the thread
// already is (it is called before every action). Throws std::invalid_argument for fewer than 1 thread, or
// std::runtime_error naming the cores when the system refuses the mask.
void use_compute_cores(const compute_cores& c);

// Threads for a single process with no pipeline stages to share the cores with: every core (at least 1).
int single_process_threads();

}  // namespace ap
